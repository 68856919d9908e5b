"""bucketize and searchsorted as a count: a value's insertion position in a sorted sequence is
how many of its elements lie before it (left: those not >= it; right: those not > it, which
puts NaN after everything, as torch's binary search does). A reduction over the sequence, so
its order does not matter (sorter= changes nothing) and no search depth bounds it; the
sequence is short in practice (bucket boundaries): a long one runs eagerly on the CPU."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype

aten = torch.ops.aten

# NOTE: a count reads the whole sequence per value where eager's search reads log2 of it;
# past this many elements the CPU runs searches eagerly (GPU targets take the count)
LONGEST_COUNTED_ON_CPU = 64


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
