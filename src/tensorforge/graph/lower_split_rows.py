"""Row operators of few long rows on CUDA as chunk statistics and their combination: group
norm in a UNet at batch 1 (8 rows of 8K-64K terms), a softmax or layer norm over one long row.

A block per row (schedules_cuda_rows.schedule_rows) runs such an operator on a handful of SMs.
Split as the split-K products are (lower_conv_gemm), it is two kernels:

1. chunk statistics, partial[*row, p, s]: statistic s of chunk p of the row, a row operator
   whose rows are the chunks (a block per chunk: rows x chunks blocks);
2. the operator's own kernel: each block combines its row's chunk statistics (reductions over
   the chunks, across its threads) and applies the epilogue to its stretch of the row
   (schedules_cuda_rows.schedule_split_rows), so it runs on many blocks too.

Moments: a chunk's sum and its squared deviations from its own mean, combined by Chan, Golub
and LeVeque's formula, M2 = sum_p M2_p + n_p (mean_p - mean)^2: no sum of squares less a square
of sums, so data far from zero (1000 + noise) keeps fp32 rounding. Softmax: a chunk's max and
its sum of exp(x - max), rescaled to the row's max (exp(max_p - max)).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge import te
from tensorforge.graph.schedules_cuda_rows import ROW_THREADS
from tensorforge.graph.values import Anchor, in_dtype, is_static, numel, opmath_dtype

# terms of a chunk at least: a block of 128 threads, 4 each (schedules_cuda_rows._row_threads)
MIN_CHUNK = 512
MAX_CHUNKS = 128  # chunks of a row: each block of the second kernel combines them once


def row_chunks(target, rows, length, dtype: str) -> Chunks | None:
    """How to split rows of `length` terms on `target`, or None for a block per row (CPU
    targets, sizes not static, other than float32 statistics, rows enough to fill the GPU).

    Rows are split where their blocks (ROW_THREADS each) would hold less than half the
    threads the GPU runs at once (sm_count x max_threads_per_sm: 1056 blocks of 256 on an H100);
    chunks double until rows x chunks blocks fill it, while a chunk keeps MIN_CHUNK terms and
    a row at most MAX_CHUNKS chunks. H100, a UNet's group norms (8 rows): 16 chunks of 512 for
    8K-term rows, 128 of 512 for 64K; a 64K-term softmax row: 128 chunks."""
    if target.kind != "cuda" or dtype != "float32":
        return None
    if not is_static((*rows, length)):
        return None
    count = numel(rows)
    capacity = target.sm_count * target.max_threads_per_sm // ROW_THREADS  # blocks
    if count * 2 > capacity:
        return None
    chunks = 1
    while count * chunks < capacity and chunks < MAX_CHUNKS and length // (2 * chunks) >= MIN_CHUNK:
        chunks *= 2
    if chunks == 1:
        return None
    return Chunks.of(length, chunks, target.sm_count, count)


@dataclass(frozen=True)
class Chunks:
    """`count` chunks of `length` terms (the last may be shorter) over a row of `total`; the
    second kernel's blocks cover `row_block` elements of a row each."""

    count: int
    length: int
    total: int
    row_block: int

    @staticmethod
    def of(total: int, chunks: int, sm_count: int = 1, rows: int = 1) -> Chunks:
        """`chunks` or fewer (none empty: 9 terms in 4 chunks are 3 of 3); the second kernel's
        blocks ROW_THREADS x 4 elements, fewer while they number under 2 per SM."""
        length = -(-total // chunks)
        per_thread = 4
        while per_thread > 1 and rows * -(-total // (ROW_THREADS * per_thread)) < 2 * sm_count:
            per_thread //= 2
        return Chunks(-(-total // length), length, total, ROW_THREADS * per_thread)

    def term(self, p, k):
        """The row index of term k of chunk p (past the row's end: its last term)."""
        j = p * self.length + k
        return j if self.exact else te.min(j, self.total - 1)

    def inside(self, p, k):
        """Whether term k of chunk p is on the row (None: all are)."""
        return None if self.exact else p * self.length + k < self.total

    def size(self, p, dtype: str):
        """Terms in chunk p, as a `dtype` value."""
        if self.exact:
            return te.const(float(self.length), dtype)
        return te.min(te.const(self.length, "int32"), self.total - p * self.length).astype(dtype)

    @property
    def exact(self) -> bool:
        return self.count * self.length == self.total


def split_moments(ctx, node, xv, reads, rows, chunks: Chunks, n, dtype: str):
    """Each row's sum and its squared deviations from the row's mean (lower_reduce._row_moments'
    two stages), combined from chunk statistics computed by a kernel of their own (reading
    `reads`, the buffers of `xv`); and the buffers the stages read (the chunk statistics).

    A chunk's mean and M2 by the corrected two-pass algorithm (Chan, Golub, LeVeque): its sum
    s, then the deviations' sum d and squares q about s / size: mean = (s + d) / size and
    M2 = q - d^2 / size, so a sum rounded at 1000 x 1024 terms does not offset the mean."""
    total = _chunk_reduce(ctx, f"{node.name}_chunk_sum", te.sum, xv, rows, chunks)

    def gap(i, value):  # a term less the chunk's mean by its sum
        return value - total[i] / chunks.size(i[-1], dtype)

    gaps = _chunk_reduce(ctx, f"{node.name}_chunk_gap", te.sum, xv, rows, chunks, gap)
    sq_gap = lambda i, value: _sq(gap(i, value))  # noqa: E731
    squares = _chunk_reduce(ctx, f"{node.name}_chunk_sq", te.sum, xv, rows, chunks, sq_gap)

    def mean(i):
        return (total[i] + gaps[i]) / chunks.size(i[-1], dtype)

    def m2(i):
        return squares[i] - gaps[i] * gaps[i] / chunks.size(i[-1], dtype)

    part = _statistics(ctx, node, [total, gaps, squares], [mean, m2], reads, dtype)
    z1, z2 = (te.reduce_axis((0, chunks.count), name=f"z{k}") for k in (1, 2))
    size = lambda p: chunks.size(p, dtype)  # noqa: E731
    row_total = te.compute(
        rows,
        lambda *i: te.sum(size(z1.var) * part.at((*i, z1.var, 0)), axis=z1),
        name=ctx.unique(f"{node.name}_sum"),
    )

    def deviation(i, p):  # chunk p's squared deviations from the row's mean
        return part.at((*i, p, 1)) + size(p) * _sq(part.at((*i, p, 0)) - row_total[i] / n)

    row_squares = te.compute(
        rows, lambda *i: te.sum(deviation(i, z2.var), axis=z2), name=ctx.unique(f"{node.name}_sq")
    )
    return row_total, row_squares, part.reads


def split_softmax(ctx, node, xv, reads, rows, chunks: Chunks, dtype: str):
    """Each row's max and its sum of exp(x - max) (softmax's statistics), combined from each
    chunk's max and sum of exp(x - chunk max); and the buffers they read. A chunk that is all
    -inf adds nothing (its own sum is exp(-inf + inf): NaN)."""
    high = _chunk_reduce(ctx, f"{node.name}_chunk_max", te.max, xv, rows, chunks)
    exp = lambda i, value: te.exp(value - high[i])  # noqa: E731
    exps = _chunk_reduce(ctx, f"{node.name}_chunk_sum", te.sum, xv, rows, chunks, exp)
    stats = [lambda i: high[i], lambda i: exps[i]]
    part = _statistics(ctx, node, [high, exps], stats, reads, dtype)
    z1, z2 = (te.reduce_axis((0, chunks.count), name=f"z{k}") for k in (1, 2))
    row_max = te.compute(
        rows, lambda *i: te.max(part.at((*i, z1.var, 0)), axis=z1), name=ctx.unique("row_max")
    )

    def rescaled(i, p):
        chunk_max = part.at((*i, p, 0))
        empty = chunk_max == te.const(float("-inf"), dtype)
        scaled = part.at((*i, p, 1)) * te.exp(chunk_max - row_max[i])
        return te.if_then_else(empty, te.const(0.0, dtype), scaled)

    row_sum = te.compute(
        rows, lambda *i: te.sum(rescaled(i, z2.var), axis=z2), name=ctx.unique("row_sum")
    )
    return row_max, row_sum, part.reads


def split_reduction(ctx, node, x, dims, keepdim: bool, combine, dtype: str, scale=None):
    """`combine` (te.sum, te.max, te.min) of x over `dims` (all where empty), times `scale`
    (a mean's 1 / count) where given, as chunk results and their combination; None where the
    reduced dimensions are not the trailing ones (rows contiguous in memory) or row_chunks
    does not split them. The value's anchor space is the kept dimensions and a trailing 1, the
    axis the second kernel's threads would take (schedules_cuda_rows.schedule_split_rows).
    A half-precision row is reduced in float32, its chunk results kept so, the value rounded
    to `dtype` once."""
    acc = opmath_dtype(dtype)
    ndim = x.ndim
    dims = sorted({d % ndim for d in dims}) if dims and ndim else list(range(ndim))  # (0-d: none)
    kept = tuple(x.shape[: ndim - len(dims)])
    reduced = tuple(x.shape[ndim - len(dims) :])
    if dims != list(range(len(kept), ndim)) or not is_static(reduced):
        return None
    chunks = row_chunks(ctx.target, kept, numel(reduced), acc)
    if chunks is None:
        return None

    def xv(idx):  # (*kept, term along the flattened row)
        *lead, j = idx
        index = []
        for size in reversed(reduced):
            index.append(j % size)
            j = j // size
        return in_dtype(x.at((*lead, *reversed(index))), acc)

    stage = _chunk_reduce(ctx, f"{node.name}_chunk", combine, xv, kept, chunks)
    part = _statistics(ctx, node, [stage], [lambda i: stage[i]], x.reads, acc)
    z = te.reduce_axis((0, chunks.count), name="z")
    total = te.compute(
        kept, lambda *i: combine(part.at((*i, z.var, 0)), axis=z), name=ctx.unique(node.name)
    )
    info = {"shape": (*kept, 1), "stages": [total], "row_block": ROW_THREADS}
    anchor = Anchor("reduce", total, frozenset(part.reads), x.nodes + (node.name,), info)

    def at_anchor(ia):
        value = total[tuple(ia[:-1])]
        return value if scale is None else value * te.const(scale, acc)

    def to_logical(ia):  # (*kept, 0) -> the output's index (its reduced dimensions kept as 1s)
        return tuple(ia[:-1]) + ((0,) * len(dims) if keepdim else ())

    shape = kept + ((1,) * len(dims) if keepdim else ())
    return ctx.anchored(anchor, at_anchor, dtype, shape=shape, to_logical=to_logical)


def _chunk_reduce(ctx, name, combine, xv, rows, chunks: Chunks, term=None):
    """stage[*row, p] = `combine` (te.sum, te.max) over chunk p of the row of `term(index,
    value)` (the value itself by default)."""
    k = te.reduce_axis((0, chunks.length), name="k")

    def body(*i):
        value = xv(tuple(i[:-1]) + (chunks.term(i[-1], k.var),))
        value = value if term is None else term(i, value)
        return combine(value, axis=k, where=chunks.inside(i[-1], k.var))

    return te.compute((*rows, chunks.count), body, name=ctx.unique(name))


def _statistics(ctx, node, stages, stats, reads, dtype: str):
    """The chunk statistics `stats` (functions of (*row, chunk) over `stages`, which read the
    buffers `reads`) as one kernel, a row operator whose rows are the chunks: its output
    (*row, chunk, statistic), in memory."""
    space = tuple(int(e.value) for e in stages[0].shape)
    info = {"shape": (*space, len(stats)), "stages": stages}
    anchor = Anchor("layer_norm", stages[-1], frozenset(reads), (node.name,), info)

    def at(ia):
        *i, s = ia
        value = stats[-1](tuple(i))
        for k in range(len(stats) - 2, -1, -1):
            value = te.if_then_else(s == k, stats[k](tuple(i)), value)
        return value

    return ctx.materialize(ctx.anchored(anchor, at, dtype), node=f"{node.name}_chunks")


def _sq(v):
    return v * v
