"""Pools: max / average / adaptive average and max over 2-d windows, each a reduction over its window
(an `Anchor` as lower_reduce.py's reductions), the input read through the window's index
(padding, stride, dilation and ceil_mode guarded, so no read falls outside the input)."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_pools_nd import Window, longest_window, max_pool2d_with_indices
from tensorforge.graph.lower_reduce import (
    later_outputs_read,
    only_first_output_used,
    reduction_anchor,
)
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Unsupported, in_dtype, opmath_dtype

aten = torch.ops.aten


def _pair(v):
    return list(v) * 2 if len(v) == 1 else list(v)


def _window(ctx, node, x, kernel, stride, padding, dilation, combine, name):
    """The 2-d pool's window (lower_pools_nd.Window) and the reduction over it: `combine`
    (te.max, te.sum) of the input in its accumulation dtype."""
    shape = ctx.shape_of(node) if not isinstance(node.meta["val"], tuple) else ctx.shape_of(node, 0)
    w = Window(ctx, node, x, 2, kernel, stride, padding, dilation, shape, name)
    if w.x.ndim != 4:
        raise Unsupported("a pool over other than NCHW")
    # NOTE: without padding a window may still run past the end: ceil_mode's last window
    inside_always = not any(w.padding) and all(
        _last_window_inside(o, size, k, s, d)
        for o, size, k, s, d in zip(shape[2:], w.sizes, w.kernel, w.stride, w.dilation)
    )
    # NOTE: a maximum over contiguous windows needs no test for the padding: a position past
    # an edge is clamped onto the edge, which the same window holds (torch keeps the padding
    # at most half the window, so every window holds an element of the input)
    clamped_is_inside = combine is te.max and all(d == 1 for d in w.dilation)

    def body(*i):
        v, _, inside = w.read(i)
        v = in_dtype(v, opmath_dtype(v.dtype))  # sums in float32 (a max is exact either way)
        if inside_always or clamped_is_inside:
            return combine(v, axis=w.axes)
        return combine(v, axis=w.axes, where=inside)

    return w, te.compute(shape, body, name=ctx.unique(f"{name}_{node.name}")), shape


def _last_window_inside(out, size, kernel, stride, dilation) -> bool:
    """The last of `out` windows ends inside `size` (unknown sizes: not proven)."""
    if not (isinstance(out, int) and isinstance(size, int)):
        return False
    return (out - 1) * stride + (kernel - 1) * dilation < size


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool2d.default)
def max_pool2d(ctx, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    if node.target is aten.max_pool2d_with_indices.default and later_outputs_read(node):
        return max_pool2d_with_indices(ctx, node, x, kernel, stride, padding, dilation, ceil_mode)
    w, stage, shape = _window(ctx, node, x, kernel, stride, padding, dilation, te.max, "maxpool")
    anchor = reduction_anchor(ctx, "window", [stage], w.x.reads, shape, w.x.nodes + (node.name,))
    value = ctx.anchored(anchor, lambda ia: stage[tuple(ia)], w.x.dtype)
    return (value, None) if node.target is aten.max_pool2d_with_indices.default else value


@lowers(aten.avg_pool2d.default)
def avg_pool2d(
    ctx,
    node,
    x,
    kernel,
    stride=(),
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):
    w, stage, shape = _window(ctx, node, x, kernel, stride, padding, 1, te.sum, "avgpool")
    (kh, kw), (sh, sw), (ph, pw), (H, W) = w.kernel, w.stride, w.padding, w.sizes
    dtype = stage.dtype

    def count(ia):
        if divisor_override:
            return te.const(float(divisor_override), dtype)
        if ph == 0 and pw == 0 and not ceil_mode:
            return te.const(float(kh * kw), dtype)
        y0, x0 = ia[2] * sh - ph, ia[3] * sw - pw
        y1, x1 = te.min(y0 + kh, H + ph), te.min(x0 + kw, W + pw)
        if not count_include_pad:
            y0, x0, y1, x1 = te.max(y0, 0), te.max(x0, 0), te.min(y1, H), te.min(x1, W)
        return ((y1 - y0) * (x1 - x0)).astype(dtype)

    anchor = reduction_anchor(ctx, "window", [stage], w.x.reads, shape, w.x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)] / count(ia), w.x.dtype)


@lowers(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(ctx, node, x, output_size):
    x = ctx.lazy(x)
    oh, ow = _pair(list(output_size))
    H, W = x.shape[-2], x.shape[-1]
    if x.ndim == 4 and isinstance(H, int) and isinstance(W, int) and not H % oh and not W % ow:
        kernel = [H // oh, W // ow]  # windows of one size: an average pool
        return avg_pool2d(ctx, node, x, kernel, kernel, [0], False, True, None)
    x, stage, shape, count = _adaptive(ctx, node, x, (oh, ow), te.sum, "adaptive_avgpool")
    anchor = reduction_anchor(ctx, "window", [stage], x.reads, shape, x.nodes + (node.name,))
    return ctx.anchored(
        anchor, lambda ia: stage[tuple(ia)] / count(ia).astype(stage.dtype), x.dtype
    )


@lowers(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(ctx, node, x, output_size):
    only_first_output_used(node)
    oh, ow = _pair(list(output_size))
    x, stage, shape, _ = _adaptive(ctx, node, x, (oh, ow), te.max, "adaptive_maxpool")
    anchor = reduction_anchor(ctx, "window", [stage], x.reads, shape, x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], x.dtype), None


def _adaptive(ctx, node, x, output_size, combine, name):
    """An adaptive pool's windows, of sizes that may differ (7 -> 3: 3, 3 and 3 rows starting
    at 0, 2 and 4): output row i reduces input rows floor(i H / oh) to ceil((i + 1) H / oh),
    the reduction as long as the longest window and guarded past each one's end. Returns
    (x, stage, shape, the element count of an output's window)."""
    x = ctx.buffer(x)
    if x.ndim not in (3, 4):
        raise Unsupported("an adaptive pool over other than (N)CHW")
    H, W = x.shape[-2], x.shape[-1]
    (oh, ow), shape = output_size, ctx.shape_of(node, 0) if _pair_out(node) else ctx.shape_of(node)
    ry = te.reduce_axis((0, longest_window(H, oh)), name="ry")
    rx = te.reduce_axis((0, longest_window(W, ow)), name="rx")

    def bounds(i, size, out):
        return (i * size) // out, ((i + 1) * size + out - 1) // out

    def body(*index):
        *lead, y, xx = index
        (y0, y1), (x0, x1) = bounds(y, H, oh), bounds(xx, W, ow)
        iy, ix = y0 + ry.var, x0 + rx.var
        v = x.at((*lead, te.min(iy, H - 1), te.min(ix, W - 1)))  # (clamped: read in bounds)
        v = in_dtype(v, opmath_dtype(v.dtype))  # sums in float32 (a max is exact either way)
        return combine(v, axis=[ry, rx], where=te.all(iy < y1, ix < x1))

    def count(ia):
        (y0, y1), (x0, x1) = bounds(ia[-2], H, oh), bounds(ia[-1], W, ow)
        return (y1 - y0) * (x1 - x0)

    stage = te.compute(shape, body, name=ctx.unique(f"{name}_{node.name}"))
    return x, stage, shape, count


def _pair_out(node) -> bool:
    return isinstance(node.meta["val"], tuple)
