"""histc on the CPU as an ir_builder kernel that reads each element once: the elements in
parallel tasks, each counting into a histogram of its own (on its stack), the tasks' histograms
summed bin by bin at the end. The bin of each element of a block is computed first, in vectors
(eager's formula, `bins_of`), then counted one by one; an element outside the range, or NaN,
counts in a spare bin past the last. A range from the data (min = max) takes a first pass of
per-task minima and maxima; equal ones widen to [min - 1, max + 1], as eager's.

(lower_buckets.py's count per bin reads every element once per bin: fine for a few bins, and
the GPU's kernel.)
"""

from __future__ import annotations

import math

from tensorforge import te
from tensorforge.graph.extern_kernels import extern_kernel, vector_loop, wide
from tensorforge.runtime.native_call import num_threads

BLOCK = 256  # elements whose bins a task computes (in vectors) before counting them
TASK_ELEMENTS = 1 << 15  # at least this many elements a task: fewer tasks' histograms to sum
MOST_BINS = 1 << 16  # a task's histogram: 256 KiB of int32 counts


def bins_of(v, low, high, bins: int) -> te.Expr:
    """The bin of v in [low, high] (int32): int((v - low) bins / (high - low)) in v's dtype, as
    eager's linear interpolation computes it, `high` itself in the last bin; `bins` (the spare
    one) for v outside, or NaN."""
    at = ((v - low) * te.const(bins, v.dtype) / (high - low)).astype("int32")
    at = te.if_then_else(at >= bins, te.const(bins - 1, "int32"), at)
    inside = te.all(v >= low, v <= high)
    return te.if_then_else(inside, at, te.const(bins, "int32"))


def histogram_kernel(ctx, node, flat, numel: int, bins: int, low, high):
    """The histogram of `flat` (1-d, in memory, `numel` elements) in `bins` bins over [low, high]
    (Python numbers), or over the data's range where `low` is None."""
    dtype = flat.dtype
    tasks = max(1, min(math.ceil(numel / TASK_ELEMENTS), 4 * num_threads()))
    share = math.ceil(numel / tasks)
    lanes = ctx.target.vector_lanes(dtype)

    def program(ib, ins, out):
        (x,) = ins
        limits = (te.const(low, dtype), te.const(high, dtype)) if low is not None else None
        if limits is None:
            limits = _data_range(ib, x, numel, tasks, share, lanes)
        partial = ib.allocate("int32", tasks * bins, name="partial", scope="global")
        with ib.for_range(0, tasks, name="t", kind="parallel" if tasks > 1 else "serial") as t:
            counts = ib.allocate("int32", bins + 1, name="counts", scope="local")
            where = ib.allocate("int32", BLOCK, name="where", scope="local")

            def clear(b):
                counts[b] = te.const(0, "int32")

            vector_loop(ib, bins + 1, lanes, clear, name="z")
            start = ib.let("start", wide(t) * share)
            end = ib.let("end", te.min(start + share, wide(numel)))
            blocks = ib.let("blocks", (end - start + (BLOCK - 1)) // BLOCK)
            with ib.for_range(0, blocks, name="k") as k:
                first = ib.let("first", start + k * BLOCK)
                length = ib.let("length", te.min(end - first, wide(BLOCK)))

                def locate(j):
                    v = x[te.min(first + j, wide(numel - 1))]  # (lanes past the end: not counted)
                    where[j] = bins_of(v, *limits, bins)

                vector_loop(ib, BLOCK, lanes, locate, name="j")
                with ib.for_range(0, length, name="e") as e:
                    b = ib.let("b", where[e])
                    counts[b] = counts[b] + 1

            def keep(b):
                partial[t * bins + b] = counts[b]

            vector_loop(ib, bins, lanes, keep, name="w")
        parallel = "parallel" if bins >= 4096 else "serial"
        with ib.for_range(0, bins, name="b", kind=parallel) as b:
            total = ib.allocate("int32", 1, name="total", scope="local")
            total[0] = te.const(0, "int32")
            with ib.for_range(0, tasks, name="s") as s:
                total[0] = total[0] + partial[s * bins + b]
            out[b] = total[0].astype(dtype)

    return extern_kernel(ctx, node, [flat], (bins,), dtype, program)


def _data_range(ib, x, numel: int, tasks: int, share: int, lanes: int):
    """(low, high): the data's minimum and maximum, [m - 1, m + 1] where they are equal, as
    variables (each task's pass in parallel, then combined)."""
    dtype = x.dtype
    extremes = ib.allocate(dtype, 2 * tasks, name="extremes", scope="global")
    with ib.for_range(0, tasks, name="t", kind="parallel" if tasks > 1 else "serial") as t:
        lo = ib.allocate(dtype, lanes, name="lo", scope="local")
        hi = ib.allocate(dtype, lanes, name="hi", scope="local")
        start = ib.let("start", wide(t) * share)
        end = ib.let("end", te.min(start + share, wide(numel)))
        with ib.for_range(0, lanes, name="l", kind="vectorize") as lane:
            lo[lane] = te.const(math.inf, dtype)
            hi[lane] = te.const(-math.inf, dtype)
        vectors = ib.let("vectors", (end - start) // lanes)
        with ib.for_range(0, vectors, name="v") as v:
            with ib.for_range(0, lanes, name="l", kind="vectorize") as lane:
                value = x[start + v * lanes + lane]
                lo[lane] = te.min(lo[lane], value)
                hi[lane] = te.max(hi[lane], value)
        with ib.for_range(start + vectors * lanes, end, name="e") as e:
            lo[0] = te.min(lo[0], x[e])
            hi[0] = te.max(hi[0], x[e])
        extremes[t] = lo[0]
        extremes[tasks + t] = hi[0]
        with ib.for_range(1, lanes, name="l") as lane:
            extremes[t] = te.min(extremes[t], lo[lane])
            extremes[tasks + t] = te.max(extremes[tasks + t], hi[lane])
    with ib.for_range(1, tasks, name="s") as s:
        extremes[0] = te.min(extremes[0], extremes[s])
        extremes[tasks] = te.max(extremes[tasks], extremes[tasks + s])
    low, high = ib.let("low", extremes[0]), ib.let("high", extremes[tasks])
    equal = low == high
    one = te.const(1, dtype)
    return (
        ib.let("lower", te.if_then_else(equal, low - one, low)),
        ib.let("upper", te.if_then_else(equal, high + one, high)),
    )
