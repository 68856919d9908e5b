"""A CUDA block sorting one line in shared memory (lower_sort.py's sort and topk of lines past
CUDA_LINE, up to BLOCK_SORT_LINE): the line padded to a power of two P, then a bitonic sorting
network of log2(P) (log2(P) + 1) / 2 steps, each a compare-exchange of P / 2 pairs spread over
the block's threads, a barrier between steps.

Elements compare as (key, position): the key in torch's order (NaN greatest), equal keys by
their position in the line, so the network (not stable in itself) gives the stable order; the
padding (positions m to P - 1) goes after every element of the line.
"""

from __future__ import annotations

from tensorforge import te
from tensorforge.graph.extern_kernels import Lines, wide
from tensorforge.graph.sort_lines import Line, key_dtype, order
from tensorforge.ir.stmt import Sync
from tensorforge.te import dtype as dt

THREADS = 512  # a block's threads at most (P / 2 of them for shorter lines)


def padded_extent(m: int) -> int:
    """The line's length rounded up to a power of two."""
    return 1 << max(m - 1, 1).bit_length()


def block_sort_program(lines: Lines, dtype: str, descending: bool, keep: int):
    """program(ib, ins, outs) writing the first `keep` of each line sorted (values, indices)
    into outs (lines of `keep` along the same dimension)."""
    m = lines.extent
    assert isinstance(m, int)
    size = padded_extent(m)
    threads = min(size // 2, THREADS)
    key = key_dtype(dtype)
    key_before = order(descending, dt.is_float(key))

    def before(a, pa, b, pb):
        """(a, pa) goes strictly before (b, pb)."""
        real_a, real_b = pa < m, pb < m
        equal = ~key_before(a, b) & ~key_before(b, a)
        by_key = key_before(a, b) | (equal & (pa < pb))
        return (real_a & ~real_b) | (real_a & real_b & by_key) | (~real_a & ~real_b & (pa < pb))

    def program(ib, ins, outs):
        block, thread = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
        ib.scope_attr(block, "thread_extent", wide(lines.count).astype("int32"))
        ib.scope_attr(thread, "thread_extent", threads)
        r = ib.let("r", block.var.astype("int64"))
        t = ib.let("t", thread.var)
        line = Line(ib, ins[0], lines, r, key)
        keys = ib.allocate(key, size, name="keys", scope="shared")
        positions = ib.allocate("int32", size, name="positions", scope="shared")
        for e in range(size // threads):  # the line, then the padding
            i = t + e * threads
            keys[i] = te.if_then_else(i < m, line.at(te.min(i, m - 1)), te.const(0, key))
            positions[i] = i
        ib.emit(Sync())
        width = 2
        while width <= size:  # bitonic runs of `width`, merged by steps of `half` down to 1
            half = width // 2
            while half >= 1:
                for e in range((size // 2) // threads):
                    with ib.new_scope():  # (its variables end with it: no nesting step on step)
                        _compare_exchange(
                            ib, (keys, positions), t + e * threads, half, width, before
                        )
                ib.emit(Sync())
                half //= 2
            width *= 2
        for e in range(size // threads):
            i = t + e * threads
            with ib.if_scope(i < keep):
                line.write(outs, i, keys[i], positions[i], keep)

    return program


def _compare_exchange(ib, scratch, q, half, width: int, before) -> None:
    """Pair q of a step: elements i and i + half, in order within their bitonic run of `width`
    (rising where i // width is even, else falling)."""
    keys, positions = scratch
    i = ib.let("i", (q // half) * (2 * half) + q % half)
    j = ib.let("j", i + half)
    a, b = ib.let("a", keys[i]), ib.let("b", keys[j])
    pa, pb = ib.let("pa", positions[i]), ib.let("pb", positions[j])
    rising = (i // width) % 2 == 0
    swap = ib.let("swap", te.if_then_else(rising, before(b, pb, a, pa), before(a, pa, b, pb)))
    with ib.if_scope(swap):
        keys[i], keys[j] = b, a
        positions[i], positions[j] = pb, pa
