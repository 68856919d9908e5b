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
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, opmath_dtype

aten = torch.ops.aten


class Reach:
    """The windows (blocks) along one dimension that reach an output position o, where
    o = block * stride - pad + tap * dilation: at step j of `steps`, (block, tap, whether that
    window does). Without dilation only ceil(kernel / stride) taps can land on o (one where the
    windows do not overlap): tap (o + pad) mod stride + j stride of block (o + pad) // stride - j;
    with dilation, each tap j, where o + pad - j dilation is a multiple of the stride."""

    def __init__(self, kernel: int, stride: int, pad: int, dilation: int, blocks):
        self.kernel, self.stride, self.pad, self.dilation = kernel, stride, pad, dilation
        self.blocks = blocks
        self.steps = -(-kernel // stride) if dilation == 1 else kernel

    def at(self, o, j):
        s = self.stride
        if self.dilation == 1:
            t = o + self.pad  # >= 0
            block = (te.floordiv(t, s) if s != 1 else t) - j
            tap = t - block * s
            reaches = te.all(block >= 0, block < self.blocks, tap < self.kernel)
        else:
            t = o + self.pad - j * self.dilation
            block, tap = te.floordiv(te.max(t, 0), s) if s != 1 else te.max(t, 0), j
            reaches = te.all(t >= 0, block < self.blocks)
            if s != 1:
                reaches = te.all(reaches, te.floormod(te.max(t, 0), s) == 0)
        block = te.max(te.min(block, self.blocks - 1), 0)
        return block, te.max(te.min(tap, self.kernel - 1), 0), reaches


def _reaches(kernel, stride, padding, dilation, blocks) -> list[Reach]:
    return [Reach(*a) for a in zip(kernel, stride, padding, dilation, blocks)]


@lowers(aten.col2im.default)
def col2im(ctx, node, x, output_size, kernel_size, dilation, padding, stride):
    x = ctx.buffer(x)
    if x.ndim not in (2, 3):
        raise Unsupported(f"col2im of a {x.ndim}-d tensor")
    kernel, dilation = per_dim(kernel_size, 2, None), per_dim(dilation, 2, 1)
    padding, stride = per_dim(padding, 2, 0), per_dim(stride, 2, 1)
    shape = ctx.shape_of(node)
    blocks = [
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, p, d, k, s in zip(shape[-2:], padding, dilation, kernel, stride)
    ]
    reach = _reaches(kernel, stride, padding, dilation, blocks)
    acc = opmath_dtype(x.dtype)

    def term(index, steps):
        *lead, y, xx = index
        (by, ky, y_in), (bx, kx, x_in) = (r.at(o, j) for r, o, j in zip(reach, (y, xx), steps))
        channel = (lead[-1] * kernel[0] + ky) * kernel[1] + kx
        return in_dtype(x.at((*lead[:-1], channel, by * blocks[1] + bx)), acc), te.all(y_in, x_in)

    nodes = x.nodes + (node.name,)
    if all(r.steps == 1 for r in reach):  # windows that do not overlap: one term, no sum

        def at(index):
            v, inside = term(index, (0, 0))
            return in_dtype(te.if_then_else(inside, v, te.const(0, acc)), x.dtype)

        return Lazy(shape, x.dtype, at, x.reads, nodes, 4)
    axes = [te.reduce_axis((0, r.steps), name=f"r{d}") for d, r in enumerate(reach)]

    def body(*index):
        v, inside = term(index, [a.var for a in axes])
        return te.sum(v, axis=axes, where=inside)

    stage = te.compute(shape, body, name=ctx.unique(f"col2im_{node.name}"))
    anchor = reduction_anchor(ctx, "window", [stage], x.reads, shape, nodes)
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
    reach = _reaches(kernel, stride, padding, dilation, x.shape[-dims:])

    def candidate(index, steps):
        """(the window at `steps`, whether it reaches here and its index names here)."""
        lead, positions = index[:-dims], index[-dims:]
        found, named = [], []
        for r, o, j in zip(reach, positions, steps):
            block, _, reaches = r.at(o, j)
            found.append(block)
            named.append(reaches)
        flat = te.const(0, "int64")
        for o, size in zip(positions, shape[-dims:]):
            flat = flat * size + o.astype("int64")
        window = (*lead, *found)
        return window, te.all(*named, indices.at(window) == flat)

    nodes = x.nodes + indices.nodes + (node.name,)
    if all(r.steps == 1 for r in reach):  # windows that do not overlap: one candidate

        def at(index):
            window, named = candidate(tuple(index), [0] * dims)
            return te.if_then_else(named, x.at(window), te.const(0, x.dtype))

        return Lazy(shape, x.dtype, at, x.reads | indices.reads, nodes, 6)
    axes = [te.reduce_axis((0, r.steps), name=f"r{d}") for d, r in enumerate(reach)]
    count = 1
    for r in reach:
        count *= r.steps

    def key_body(*index):  # the first window (in step order) whose index names here
        _, named = candidate(index, [a.var for a in axes])
        step = te.const(0, "int32")
        for a, r in zip(axes, reach):
            step = step * r.steps + a.var
        return te.min(te.if_then_else(named, step, te.const(count, "int32")), axis=axes)

    key = te.compute(shape, key_body, name=ctx.unique(f"unpool_key_{node.name}"))
    anchor = reduction_anchor(ctx, "window", [key], x.reads | indices.reads, shape, nodes)

    def value(ia):
        ia = tuple(ia)
        step, steps = key[ia], []
        for r in reversed(reach):  # the step along each dimension
            steps.insert(0, te.floormod(step, r.steps))
            step = te.floordiv(step, r.steps)
        window, _ = candidate(ia, steps)
        return te.if_then_else(key[ia] < count, x.at(window), te.const(0, x.dtype))

    return ctx.anchored(anchor, value, x.dtype)


@lowers(aten.max_unpool2d.default)
def max_unpool2d(ctx, node, x, indices, output_size):
    return _max_unpool(ctx, node, x, indices, 2)


@lowers(aten.max_unpool3d.default)
def max_unpool3d(ctx, node, x, indices, output_size, stride, padding):
    return _max_unpool(ctx, node, x, indices, 3)
