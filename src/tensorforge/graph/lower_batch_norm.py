"""Inference batch norm: x * scale + shift per channel, folded from constant statistics (the
conv or product before it takes it as its epilogue), or computed from statistics the graph makes."""

from __future__ import annotations

import dataclasses

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import only_first_output_used
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported

aten = torch.ops.aten


@lowers(aten.native_batch_norm.default)
def native_batch_norm(ctx, node, x, weight, bias, mean, var, training, momentum, eps):
    if training:
        raise Unsupported("batch norm in training mode")
    return batch_norm(ctx, node, x, weight, bias, mean, var, momentum, eps)


@lowers(aten._native_batch_norm_legit_no_training.default)
def batch_norm(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    """x * scale + shift per channel, scale and shift folded from the constant statistics (and
    the weight and bias where they are constants; a weight or bias computed in the graph is
    applied after: (x * scale + shift) * weight + bias)."""
    only_first_output_used(node)
    consts = [
        ctx.constant(v) if v is not None else None
        for v in (weight, bias, running_mean, running_var)
    ]
    if consts[2] is None or consts[3] is None:
        return _batch_norm_of_computed_statistics(ctx, node, x, weight, bias, running_mean, running_var, eps)  # fmt: skip
    scale = torch.rsqrt(consts[3].float() + eps)
    computed_weight = weight is not None and consts[0] is None
    if consts[0] is not None:
        scale = scale * consts[0]
    shift = -consts[2] * scale
    late_bias = bias is not None and (consts[1] is None or computed_weight)
    if consts[1] is not None and not late_bias:
        shift = shift + consts[1]
    x = ctx.lazy(x)
    view = (-1,) + (1,) * (x.ndim - 2)
    s = ctx.add_constant(scale.reshape(view), f"{node.name}_scale")
    t = ctx.add_constant(shift.reshape(view), f"{node.name}_shift")
    late = [
        _per_channel(ctx.no_anchor(ctx.lazy(v)), x.ndim)
        for v, on in ((weight, computed_weight), (bias, late_bias))
        if on
    ]

    def fn(v, a, c, *rest):
        y = v * a + c
        if computed_weight:
            y = y * rest[0]
        if late_bias:
            y = y + rest[-1]
        return y

    return (
        ctx.pointwise(
            fn, [x, s, t, *late], shape=ctx.shape_of(node, 0), dtype=ctx.dtype_of(node, 0)
        ),
        None,
        None,
    )


def _batch_norm_of_computed_statistics(ctx, node, x, weight, bias, mean, var, eps):
    """(x - mean) / sqrt(var + eps) [* weight] [+ bias] per channel, each vector read where it
    is (statistics computed in the graph: F.batch_norm of tensors the model makes)."""
    x = ctx.lazy(x)
    vectors = [
        _per_channel(ctx.no_anchor(ctx.lazy(v)), x.ndim)
        for v in (mean, var, weight, bias)
        if v is not None
    ]
    has_weight, has_bias = weight is not None, bias is not None

    def fn(v, m, s, *rest):
        y = (v - m) * te.rsqrt(s + float(eps))
        if has_weight:
            y = y * rest[0]
        return y + rest[-1] if has_bias else y

    value = ctx.pointwise(
        fn, [x, *vectors], shape=ctx.shape_of(node, 0), dtype=ctx.dtype_of(node, 0)
    )
    return value, None, None


def _per_channel(v: Lazy, ndim: int) -> Lazy:
    """A vector of channels (C,) viewed as (C, 1, ...) to broadcast along dim 1 of ndim (`v`
    has no anchor: only `at` is viewed)."""
    shape = (v.shape[0],) + (1,) * (ndim - 2)
    return dataclasses.replace(v, shape=shape, at=lambda idx: v.at((idx[0],)), source=None)
