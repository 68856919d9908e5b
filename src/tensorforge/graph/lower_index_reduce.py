"""Reductions that give an index or a product: argmax/argmin, max/min along a dimension with
their indices, prod (full and along a dimension).

An index is found in two passes over the reduced elements, both stages of one anchor: the
extreme value, then the first position holding it, as a min-reduction over the flattened
position (ties: the first index, as torch). A NaN wins, as torch's: its positions take
precedence over every other (keys k for a NaN at k, n + k for the extreme at k, 2n elsewhere),
which holds whether or not the backend's max propagates NaN (CUDA's fmaxf drops it).
"""

from __future__ import annotations

import dataclasses

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import (
    later_outputs_read,
    reduction,
    reduction_anchor,
)
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Unsupported, in_dtype, opmath_dtype
from tensorforge.te import dtype as dt

aten = torch.ops.aten

_product = te.comm_reducer(lambda a, b: a * b, lambda dtype: te.const(1, dtype), name="prod")


@lowers(aten.prod.dim_int, aten.prod.default)
def prod(ctx, node, x, dim=None, keepdim=False, dtype=None):
    out_dtype = ctx.dtype_of(node)
    dims = None if node.target is aten.prod.default else [dim]
    x, stage, shape, *_ = reduction(ctx, node, x, dims, keepdim, _product, out_dtype)
    anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, shape, x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], out_dtype)


@lowers(aten.argmax.default, aten.argmin.default)
def argmax(ctx, node, x, dim=None, keepdim=False):
    """The first index of the largest (smallest) element along `dim`, or of the flattened
    tensor where `dim` is None."""
    largest = node.target is aten.argmax.default
    dims = None if dim is None else [dim]
    anchor, _, index = _arg_reduce(ctx, node, x, dims, keepdim, largest)
    return ctx.anchored(anchor, index, "int64")


@lowers(aten.max.dim, aten.min.dim)
def max_dim(ctx, node, x, dim, keepdim=False):
    """torch.max(x, dim) (min): the values, an amax (amin) where the indices are not read, and
    the indices where they are."""
    largest = node.target is aten.max.dim
    out_dtype = ctx.dtype_of(node, 0)
    if not later_outputs_read(node):
        combine = te.max if largest else te.min
        x, stage, shape, *_ = reduction(ctx, node, x, [dim], keepdim, combine, out_dtype)
        anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, shape, x.nodes + (node.name,))
        return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], out_dtype), None
    anchor, value, index = _arg_reduce(ctx, node, x, [dim], keepdim, largest)
    return ctx.anchored(anchor, value, out_dtype), ctx.anchored(anchor, index, "int64")


def _arg_reduce(ctx, node, x, dims, keepdim, largest: bool):
    """(anchor, the extreme value at an output index, its first position there) of `x`
    reduced over `dims` (all where None); the position counts along the dims reduced,
    flattened in order."""
    combine = te.max if largest else te.min
    x = ctx.no_anchor(x)
    value_dtype = ctx.dtype_of(node, 0) if isinstance(node.meta["val"], tuple) else x.dtype
    if dt.is_bool(value_dtype):
        raise Unsupported("argmax / argmin of bool tensors")
    if dt.is_half(x.dtype):  # an index jumps: half values read as stored, so ties are eager's
        stored, wide = x, opmath_dtype(x.dtype)
        x = dataclasses.replace(
            x, dtype=wide, at=lambda idx: stored.at(idx).astype(wide), source=None
        )
    x, best, shape, full, axes, count = reduction(
        ctx, node, x, dims, keepdim, combine, value_dtype, name="best"
    )
    acc = opmath_dtype(value_dtype)
    n = te.const(count, "int64") if isinstance(count, int) else count.astype("int64")
    is_float = dt.is_float(acc)

    def position(*i):
        index = full(i)
        v = in_dtype(x.at(index), acc)
        flat = te.const(0, "int64")
        for axis in axes:  # the reduced positions, flattened in x's order
            flat = flat * axis.dom.extent.astype("int64") + axis.var.astype("int64")
        hit = te.if_then_else(v == best[i], flat + n, n + n)
        key = te.if_then_else(v != v, flat, hit) if is_float else hit
        return te.min(key, axis=axes)

    first = te.compute(shape, position, name=ctx.unique(f"first_{node.name}"))
    nodes = x.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "reduce", [best, first], x.reads, shape, nodes)

    def index(ia):
        key = first[tuple(ia)]
        return te.if_then_else(key < n, key, key - n)  # a NaN's position, or the extreme's

    def value(ia):
        extreme = best[tuple(ia)]
        if not is_float:
            return extreme
        nan = te.const(float("nan"), extreme.dtype)
        return te.if_then_else(first[tuple(ia)] < n, nan, extreme)

    return anchor, value, index
