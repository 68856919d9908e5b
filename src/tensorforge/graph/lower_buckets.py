"""bucketize and searchsorted as a count: a value's insertion position in a sorted sequence is
how many of its elements lie before it (left: those not >= it; right: those not > it, which
puts NaN after everything, as torch's binary search does). A reduction over the sequence, so
its order does not matter (sorter= changes nothing) and no search depth bounds it; the
sequence is short in practice (bucket boundaries): a long one runs eagerly on the CPU. histc
of a given range likewise on the GPU: each bin counts the elements that fall in it (the CPU's
kernel, lower_histogram.py, reads each element once)."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_histogram import MOST_BINS, bins_of, histogram_kernel
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.lower_views import reshaped
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype
from tensorforge.te import dtype as dt

aten = torch.ops.aten

# NOTE: a count reads the whole sequence per value where eager's search reads log2 of it;
# past this many elements the CPU runs searches eagerly (GPU targets take the count)
LONGEST_COUNTED_ON_CPU = 64
# histc on the CPU: lower_histogram.py's kernel, each element read once (1M elements, 1 thread,
# load ~5 on 2 cores, benchmarks/gathers.py: eager 12.2 ms against 1.15 for 16 bins, 11.6 against
# 0.55 for 100, 12.2 against 0.53 for 1000, a range from the data 8.6 against 0.85 for 100); the
# count per bin read every element once per bin (16 bins 5.5 ms, 100 bins 11.8)


def _position(ctx, node, values: Lazy, sequence: Lazy, right: bool) -> Lazy:
    length = sequence.shape[-1]
    if not isinstance(length, int) or (ctx.target.kind == "llvm" and length > LONGEST_COUNTED_ON_CPU):  # fmt: skip
        raise Unsupported(f"a search of a sequence of {length} elements on the CPU")
    shape, dtype = ctx.shape_of(node), ctx.dtype_of(node)
    rows = sequence.ndim > 1  # a sequence per row of values (their leading dimensions)
    compare = values.dtype if values.dtype == sequence.dtype else "float64"
    r = te.reduce_axis((0, length), name="r")

    def body(*index):
        v = in_dtype(values.at(tuple(index)), compare)
        b = in_dtype(sequence.at((*index[:-1], r.var) if rows else (r.var,)), compare)
        before = te.if_then_else(b > v if right else b >= v, te.const(0, dtype), te.const(1, dtype))
        return te.sum(before, axis=[r])

    stage = te.compute(shape, body, name=ctx.unique(f"search_{node.name}"))
    reads = values.reads | sequence.reads
    anchor = reduction_anchor(ctx, "reduce", [stage], reads, shape, values.nodes + sequence.nodes + (node.name,))  # fmt: skip
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], dtype)


@lowers(aten.bucketize.Tensor)
def bucketize(ctx, node, values, boundaries, out_int32=False, right=False):
    values, boundaries = ctx.no_anchor(values), ctx.buffer(boundaries)
    if boundaries.ndim != 1:
        raise Unsupported("bucketize by boundaries that are not 1-d")
    return _position(ctx, node, values, boundaries, right)


@lowers(aten.searchsorted.Tensor)
def searchsorted(
    ctx, node, sequence, values, out_int32=False, right=False, side=None, sorter=None
):  # fmt: skip
    values, sequence = ctx.no_anchor(values), ctx.buffer(sequence)
    if values.ndim == 0 or (sequence.ndim > 1 and sequence.ndim != values.ndim):
        raise Unsupported("searchsorted of a 0-d value or a sequence of another rank")
    return _position(ctx, node, values, sequence, right or side == "right")


@lowers(aten.histc.default)
def histc(ctx, node, x, bins=100, min=0, max=0):  # noqa: A002 - torch's argument names
    """Bin b counts the elements x in [min, max] with int((x - min) bins / (max - min)) = b
    (max itself in the last bin), in x's dtype, as torch's linear interpolation computes it.
    CPU: lower_histogram.py's kernel (each element read once), which also takes a range from the
    data (min = max); GPU: a count per bin of a given range."""
    x = ctx.buffer(x)
    numel = 1
    for size in x.shape:
        numel = numel * size
    if not isinstance(numel, int) or not isinstance(min, (int, float)):
        raise Unsupported("histc of run-time sizes")
    if not dt.is_float(x.dtype) or numel == 0:
        raise Unsupported(f"histc of {numel} {x.dtype} elements")
    flat = reshaped(x, (numel,))
    if ctx.target.kind == "llvm" and min <= max:
        if bins > MOST_BINS:
            raise Unsupported(f"histc of {bins} bins on the CPU (a task's histogram: {MOST_BINS})")
        limits = (None, None) if min == max else (min, max)
        return histogram_kernel(ctx, node, flat, numel, bins, *limits)
    if not min < max:
        raise Unsupported("histc of a range from the data on the GPU")
    dtype = ctx.dtype_of(node)
    r = te.reduce_axis((0, numel), name="r")

    def body(b):
        v = flat.at((r.var,))
        low, high = te.const(min, v.dtype), te.const(max, v.dtype)
        return te.sum(te.if_then_else(bins_of(v, low, high, bins) == b, te.const(1, dtype), te.const(0, dtype)), axis=[r])  # fmt: skip

    stage = te.compute((bins,), body, name=ctx.unique(f"histc_{node.name}"))
    anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, (bins,), x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], dtype)
