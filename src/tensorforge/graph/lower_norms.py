"""Vector norms of any order (linalg_vector_norm), pairwise distances (cdist) and the boolean
reductions any / all: reductions whose prologue and epilogue the order chooses."""

from __future__ import annotations

import dataclasses
import math

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import reduction, reduction_anchor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, opmath_dtype
from tensorforge.te import dtype as dt

aten = torch.ops.aten


def _norm(ctx, node, x: Lazy, dims, keepdim: bool, ord, out_dtype: str):
    """The `ord`-norm of `x` over `dims`: max |x| (inf), min |x| (-inf), the count of nonzeros
    (0), sum |x| (1), sqrt(sum x**2) (2), else (sum |x|**ord)**(1 / ord), in `out_dtype`."""
    compute = opmath_dtype(out_dtype)
    ord = float(ord)
    zero = te.const(0, compute)
    if ord == math.inf:
        combine, prologue, finish = te.max, lambda v, i: te.abs(v), None
    elif ord == -math.inf:
        combine, prologue, finish = te.min, lambda v, i: te.abs(v), None
    elif ord == 0:
        one = te.const(1, compute)
        combine, prologue, finish = te.sum, lambda v, i: te.if_then_else(v != zero, one, zero), None
    elif ord == 1:
        combine, prologue, finish = te.sum, lambda v, i: te.abs(v), None
    elif ord == 2:
        combine, prologue, finish = te.sum, lambda v, i: v * v, te.sqrt
    else:
        p, inverse = te.const(ord, compute), te.const(1 / ord, compute)
        combine = te.sum
        prologue = lambda v, i: te.power(te.abs(v), p)  # noqa: E731
        finish = lambda s: te.power(s, inverse)  # noqa: E731
    x, stage, shape, *_ = reduction(
        ctx, node, x, dims, keepdim, combine, out_dtype, prologue, out_shape=_reduced(ctx, node, x, dims, keepdim)
    )  # fmt: skip
    anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, shape, x.nodes + (node.name,))
    at = (lambda ia: stage[tuple(ia)]) if finish is None else (lambda ia: finish(stage[tuple(ia)]))
    return ctx.anchored(anchor, at, out_dtype)


def _reduced(ctx, node, x: Lazy, dims, keepdim: bool) -> tuple:
    """The norm's shape from its dims, not the node's fake tensor: torch 2.11's kept a reduced
    dimension of 1 (an H100 run, (17, 1, 65, 1) over dim -1: (17, 1, 65, 1), eager's
    (17, 1, 65); GPU fuzz seed 9188)."""
    shape = ctx.shape_of(node)
    if not shape or not dims:  # a full reduction, a 0-d tensor's
        return shape
    reduced = {d % x.ndim for d in dims}
    return tuple(
        1 if d in reduced else x.shape[d] for d in range(x.ndim) if keepdim or d not in reduced
    )


@lowers(aten.linalg_vector_norm.default)
def vector_norm(ctx, node, x, ord=2, dim=None, keepdim=False, dtype=None):
    out_dtype = ctx.dtype_of(node)
    if not dt.is_float(out_dtype):
        raise Unsupported(f"a vector norm of {out_dtype}")
    x = ctx.no_anchor(x)
    if dtype is not None:  # the input converted first
        x = _converted(x, out_dtype)
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    return _norm(ctx, node, x, dims, keepdim, ord, out_dtype)


def _converted(x: Lazy, dtype: str) -> Lazy:
    if x.dtype == dtype:
        return x
    return dataclasses.replace(x, dtype=dtype, at=lambda idx: x.at(idx).astype(dtype), source=None)


@lowers(aten._cdist_forward.default)
def cdist(ctx, node, x1, x2, p, compute_mode=None):
    """out[..., i, j] = the p-norm of x1[..., i, :] - x2[..., j, :] (each compute mode: the
    differences directly, where eager's matrix-product form for p = 2 rounds differently)."""
    out_dtype = ctx.dtype_of(node)
    x1, x2 = ctx.no_anchor(x1), ctx.no_anchor(x2)
    out = ctx.shape_of(node)
    lead = len(out) - 2
    shape = (*out, x1.shape[-1])

    def leading(x: Lazy, idx) -> tuple:  # the batch dims broadcast to the output's
        own = idx[lead - (x.ndim - 2) : lead]
        return tuple(0 if x.shape[k] == 1 else i for k, i in enumerate(own))

    def at(idx):
        *_, i, j, k = idx
        a = in_dtype(x1.at((*leading(x1, idx), i, k)), out_dtype)
        b = in_dtype(x2.at((*leading(x2, idx), j, k)), out_dtype)
        return a - b

    diffs = Lazy(
        shape, out_dtype, at, x1.reads | x2.reads, tuple(dict.fromkeys(x1.nodes + x2.nodes)), 3
    )
    return _norm(ctx, node, diffs, [len(out)], False, p, out_dtype)


def _boolean(x: Lazy, test) -> Lazy:
    """1 (int32) where `test(element)` holds, else 0."""

    def at(idx):
        v = x.at(idx)
        if dt.is_bool(v.dtype):
            v = v.astype("int32")
        return te.if_then_else(test(v, te.const(0, v.dtype)), 1, 0)

    return dataclasses.replace(x, dtype="int32", at=at, source=None, cost=x.cost + 1)


@lowers(
    aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default
)
def any_all(ctx, node, x, dim=None, keepdim=False):
    """any: the count of nonzero elements is positive; all: the count of zeros is 0 (so over
    no elements any is False and all True). uint8 gives uint8, as torch."""
    is_any = node.target.overloadpacket is aten.any
    out_dtype = ctx.dtype_of(node)
    x = ctx.no_anchor(x)
    counted = _boolean(x, (lambda v, z: v != z) if is_any else (lambda v, z: v == z))
    dims = [dim] if isinstance(dim, int) else list(dim or [])  # (none: every dimension)
    counted, stage, shape, *_ = reduction(ctx, node, counted, dims, keepdim, te.sum, "int32")
    reads, nodes = counted.reads, counted.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "reduce", [stage], reads, shape, nodes)
    zero = te.const(0, "int32")

    def at(ia):
        count = stage[tuple(ia)]
        return ((count > zero) if is_any else (count == zero)).astype(out_dtype)

    return ctx.anchored(anchor, at, out_dtype)
