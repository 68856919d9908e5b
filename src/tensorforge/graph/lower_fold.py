"""Scatters written as gathers: col2im (F.fold), where each output pixel sums the columns whose
window covers it, and max_unpool2d / max_unpool3d of a max pool's indices, where each output
position takes the pooled value whose index names it, among the windows that can reach it.
(torch's decompositions of both scatter with index_put, which the graph runs eagerly.)"""

from __future__ import annotations

import operator

import torch

from tensorforge import te
from tensorforge.graph.lower_pools_nd import per_dim
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Unsupported, in_dtype, opmath_dtype

aten = torch.ops.aten


def _taps(out_position, pad, dilation, stride, blocks, axis):
    """The window (block) whose tap `axis` lands on `out_position`, clamped into 0..blocks-1,
    and whether one does: out = block * stride - pad + tap * dilation."""
    t = out_position + pad - axis.var * dilation
    block = te.floordiv(te.max(t, 0), stride) if stride != 1 else te.max(t, 0)
    reaches = te.all(t >= 0, block < blocks)
    if stride != 1:
        reaches = te.all(reaches, te.floormod(te.max(t, 0), stride) == 0)
    return te.min(block, blocks - 1), reaches


@lowers(aten.col2im.default)
def col2im(ctx, node, x, output_size, kernel_size, dilation, padding, stride):
    x = ctx.buffer(x)
    if x.ndim not in (2, 3):
        raise Unsupported(f"col2im of a {x.ndim}-d tensor")
    kernel, dilation = per_dim(kernel_size, 2, None), per_dim(dilation, 2, 1)
    padding, stride = per_dim(padding, 2, 0), per_dim(stride, 2, 1)
    shape = ctx.shape_of(node)
    sizes = list(shape[-2:])
    blocks = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, p, d, k, s in zip(sizes, padding, dilation, kernel, stride)
    ]
    axes = [te.reduce_axis((0, k), name=f"r{d}") for d, k in enumerate(kernel)]
    acc = opmath_dtype(x.dtype)

    def body(*index):
        *lead, y, xx = index
        (by, y_in), (bx, x_in) = (
            _taps(o, p, d, s, b, a)
            for o, p, d, s, b, a in zip((y, xx), padding, dilation, stride, blocks, axes)
        )
        channel = (lead[-1] * kernel[0] + axes[0].var) * kernel[1] + axes[1].var
        v = x.at((*lead[:-1], channel, by * blocks[1] + bx))
        return te.sum(in_dtype(v, acc), axis=axes, where=te.all(y_in, x_in))

    stage = te.compute(shape, body, name=ctx.unique(f"col2im_{node.name}"))
    anchor = reduction_anchor(ctx, "window", [stage], x.reads, shape, x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], x.dtype)


POOLS = {
    aten.max_pool2d_with_indices.default: 2,
    aten.max_pool3d_with_indices.default: 3,
}


def _pool_of(indices_node, dims: int):
    """The (kernel, stride, padding, dilation, input shape) of the max pool whose indices
    `indices_node` is, else Unsupported (any other index tensor runs eagerly: eager checks its
    range)."""
    if not (
        isinstance(indices_node, torch.fx.Node)
        and indices_node.target is operator.getitem
        and indices_node.args[1] == 1
        and POOLS.get(indices_node.args[0].target) == dims
    ):
        raise Unsupported("max_unpool of indices that are not a max pool's")
    pool = indices_node.args[0]
    names = ["input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"]
    args = dict(zip(names, pool.args)) | dict(pool.kwargs)
    kernel = per_dim(args["kernel_size"], dims, None)
    stride = per_dim(args.get("stride"), dims, kernel)
    padding, dilation = (
        per_dim(args.get("padding"), dims, 0),
        per_dim(args.get("dilation"), dims, 1),
    )
    return kernel, stride, padding, dilation, tuple(args["input"].meta["val"].shape)


def _max_unpool(ctx, node, x, indices, dims: int):
    kernel, stride, padding, dilation, pooled_from = _pool_of(node.args[1], dims)
    shape = ctx.shape_of(node)
    if tuple(node.meta["val"].shape[-dims:]) != pooled_from[-dims:]:
        raise Unsupported("max_unpool to another size than the pool's input")
    x, indices = ctx.buffer(x), ctx.buffer(indices)
    windows = list(x.shape[-dims:])
    axes = [te.reduce_axis((0, k), name=f"r{d}") for d, k in enumerate(kernel)]
    taps = 1
    for k in kernel:
        taps *= k

    def window_of(positions, tap_vars):
        found, reaches = [], []
        for o, p, d, s, b, t in zip(positions, padding, dilation, stride, windows, tap_vars):
            block, inside = _taps(o, p, d, s, b, t)
            found.append(block)
            reaches.append(inside)
        return found, te.all(*reaches)

    def flat(positions):
        at = te.const(0, "int64")
        for o, size in zip(positions, shape[-dims:]):
            at = at * size + o.astype("int64")
        return at

    def key_body(*index):  # the first tap (in window order) whose window's index names here
        lead, positions = index[:-dims], index[-dims:]
        found, reaches = window_of(positions, axes)
        named = indices.at((*lead, *found)) == flat(positions)
        tap = te.const(0, "int32")
        for a, k in zip(axes, kernel):
            tap = tap * k + a.var
        return te.min(
            te.if_then_else(named, tap, te.const(taps, "int32")), axis=axes, where=reaches
        )

    key = te.compute(shape, key_body, name=ctx.unique(f"unpool_key_{node.name}"))
    nodes = x.nodes + indices.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "window", [key], x.reads | indices.reads, shape, nodes)

    def value(ia):
        ia = tuple(ia)
        tap, remaining = key[ia], []
        for k in reversed(kernel):  # the tap's position along each dimension
            remaining.insert(0, te.floormod(tap, k))
            tap = te.floordiv(tap, k)
        found, _ = window_of(ia[-dims:], [_Tap(r) for r in remaining])
        v = x.at((*ia[:-dims], *found))
        return te.if_then_else(key[ia] < taps, v, te.const(0, v.dtype))

    return ctx.anchored(anchor, value, x.dtype)


class _Tap:
    """A tap position given as an expression, where _taps expects a reduce axis."""

    def __init__(self, expr):
        self.var = expr


@lowers(aten.max_unpool2d.default)
def max_unpool2d(ctx, node, x, indices, output_size):
    return _max_unpool(ctx, node, x, indices, 2)


@lowers(aten.max_unpool3d.default)
def max_unpool3d(ctx, node, x, indices, output_size, stride, padding):
    return _max_unpool(ctx, node, x, indices, 3)
