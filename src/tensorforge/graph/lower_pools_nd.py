"""Pools over windows of any rank (1-d, 2-d, 3-d): 3-d max and average pools, and max pools whose
indices are read (torch's flat position within each plane, of the first maximum in the window's
order, or of its last NaN): each a reduction over its window guarded by the padding and
ceil_mode's last window (lower_pools.py keeps the 2-d pools whose indices nobody reads)."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import later_outputs_read, reduction_anchor
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Unsupported, in_dtype, opmath_dtype
from tensorforge.te import dtype as dt

aten = torch.ops.aten


def per_dim(v, dims: int, default) -> list:
    v = default if v is None or (isinstance(v, (list, tuple)) and not v) else v
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * dims if len(v) == 1 else v


class Window:
    """A pool's window over the last `dims` dimensions of `x` (in memory): its reduce axes and,
    at an output index, the input positions under them and whether they are inside the input."""

    def __init__(self, ctx, node, x, dims, kernel, stride, padding, dilation, shape, name):
        self.x = ctx.buffer(x)
        if self.x.ndim not in (dims + 1, dims + 2):
            raise Unsupported(f"a {dims}-d pool of a {self.x.ndim}-d tensor")
        self.dims, self.shape = dims, shape
        self.kernel = per_dim(kernel, dims, None)
        self.stride = per_dim(stride, dims, self.kernel)
        self.padding = per_dim(padding, dims, 0)
        self.dilation = per_dim(dilation, dims, 1)
        self.sizes = list(self.x.shape[-dims:])
        self.axes = [te.reduce_axis((0, k), name=f"r{d}") for d, k in enumerate(self.kernel)]
        self.name = name

    def positions(self, out_index):
        """(the input positions, one per spatial dim, clamped into it; inside the input)."""
        at = [
            o * s - p + a.var * d
            for o, s, p, a, d in zip(
                out_index[-self.dims :], self.stride, self.padding, self.axes, self.dilation
            )
        ]
        inside = te.all(*(te.all(i >= 0, i < size) for i, size in zip(at, self.sizes)))
        clamped = [te.max(te.min(i, size - 1), 0) for i, size in zip(at, self.sizes)]
        return clamped, inside

    def read(self, out_index):
        clamped, inside = self.positions(out_index)
        return self.x.at((*out_index[: -self.dims], *clamped)), clamped, inside


def _max_pool(ctx, node, x, dims, kernel, stride, padding, dilation, ceil_mode):
    shape = ctx.shape_of(node, 0)
    w = Window(ctx, node, x, dims, kernel, stride, padding, dilation, shape, "maxpool")
    return _max_over(ctx, node, w, shape)


def _max_over(ctx, node, w, shape, indices: bool = True):
    """The maximum over each of `w`'s windows and, with `indices`, its index within the plane
    (torch's: of the first maximum in the window's order, or of its last NaN)."""
    acc = opmath_dtype(w.x.dtype)

    def best_body(*i):
        v, _, inside = w.read(i)
        return te.max(in_dtype(v, acc), axis=w.axes, where=inside)

    best = te.compute(shape, best_body, name=ctx.unique(f"maxpool_{node.name}"))
    if not indices:
        anchor = reduction_anchor(ctx, "window", [best], w.x.reads, shape, w.x.nodes + (node.name,))
        return ctx.anchored(anchor, lambda ia: best[tuple(ia)], w.x.dtype), None
    plane = 1
    for size in w.sizes:
        plane = plane * size
    # keys in int32 where the plane's positions fit (the vectors of a float32 input's width)
    key_dtype = "int32" if isinstance(plane, int) and plane < 2**30 else "int64"
    big = te.const(plane, key_dtype) if isinstance(plane, int) else plane.astype(key_dtype)
    is_float = dt.is_float(acc)
    # NOTE: a max pool of contiguous windows (lower_pools._window) needs no test for the
    # padding here either: a position past an edge is clamped onto the edge, which the same
    # window holds, at the same flat position (an adaptive window's end is no edge)
    clamped_is_inside = isinstance(w, Window) and all(d == 1 for d in w.dilation)

    def first_body(*i):  # min over the window of: -(flat + 1) at a NaN, flat at the max, else big
        v, clamped, inside = w.read(i)
        v = in_dtype(v, acc)
        flat = te.const(0, key_dtype)
        for c, size in zip(clamped, w.sizes):
            size = te.const(size, key_dtype) if isinstance(size, int) else size.astype(key_dtype)
            flat = flat * size + c.astype(key_dtype)
        key = te.if_then_else(v == best[i], flat, big)
        if is_float:
            key = te.if_then_else(v != v, -flat - 1, key)
        return te.min(key, axis=w.axes, where=None if clamped_is_inside else inside)

    first = te.compute(shape, first_body, name=ctx.unique(f"maxpool_index_{node.name}"))
    nodes = w.x.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "reduce", [best, first], w.x.reads, shape, nodes)

    def value(ia):
        # NOTE: on the CPU te.max is llvm.maximum, which keeps a NaN: the maximum alone is the
        # value, one pass over the window rather than two (CUDA's fmaxf drops a NaN)
        if not is_float or ctx.target.kind == "llvm":
            return best[tuple(ia)]
        nan = te.const(float("nan"), best.dtype)
        return te.if_then_else(first[tuple(ia)] < 0, nan, best[tuple(ia)])

    def index(ia):
        key = first[tuple(ia)]
        return te.if_then_else(key < 0, -key - 1, key).astype("int64")

    return ctx.anchored(anchor, value, w.x.dtype), ctx.anchored(anchor, index, "int64")


@lowers(aten.max_pool3d_with_indices.default)
def max_pool3d(ctx, node, x, kernel, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool(ctx, node, x, 3, kernel, stride, padding, dilation, ceil_mode)


def max_pool2d_with_indices(ctx, node, x, kernel, stride, padding, dilation, ceil_mode):
    return _max_pool(ctx, node, x, 2, kernel, stride, padding, dilation, ceil_mode)


@lowers(aten.avg_pool3d.default)
def avg_pool3d(
    ctx, node, x, kernel, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
    divisor_override=None,
):  # fmt: skip
    shape = ctx.shape_of(node)
    w = Window(ctx, node, x, 3, kernel, stride, padding, 1, shape, "avgpool")
    acc = opmath_dtype(w.x.dtype)

    def body(*i):
        v, _, inside = w.read(i)
        return te.sum(in_dtype(v, acc), axis=w.axes, where=inside)

    total = te.compute(shape, body, name=ctx.unique(f"avgpool_{node.name}"))

    def count(ia):
        if divisor_override:
            return te.const(float(divisor_override), acc)
        n = None
        for o, s, p, k, size in zip(ia[-3:], w.stride, w.padding, w.kernel, w.sizes):
            start = o * s - p
            end = te.min(start + k, size + p)
            if not count_include_pad:
                start, end = te.max(start, 0), te.min(end, size)
            n = end - start if n is None else n * (end - start)
        return n.astype(acc)

    anchor = reduction_anchor(ctx, "window", [total], w.x.reads, shape, w.x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: total[tuple(ia)] / count(ia), w.x.dtype)


class AdaptiveWindow:
    """An adaptive pool's windows over the last `dims` dimensions, of sizes that may differ
    (7 -> 3: 3, 3 and 3 rows starting at 0, 2 and 4): output i reduces input positions
    floor(i size / out) to ceil((i + 1) size / out), the reduction as long as the longest
    window and guarded past each one's end. The interface of `Window`."""

    def __init__(self, ctx, x, dims: int, output_size):
        self.x = ctx.buffer(x)
        if self.x.ndim not in (dims + 1, dims + 2):
            raise Unsupported(f"a {dims}-d adaptive pool of a {self.x.ndim}-d tensor")
        self.dims, self.outs = dims, per_dim(list(output_size), dims, None)
        self.sizes = list(self.x.shape[-dims:])
        self.axes = [
            te.reduce_axis((0, longest_window(size, out)), name=f"r{d}")
            for d, (size, out) in enumerate(zip(self.sizes, self.outs))
        ]

    def bounds(self, out_index):
        """(start, end) of the window along each dimension at an output index."""
        return [
            ((i * size) // out, ((i + 1) * size + out - 1) // out)
            for i, size, out in zip(out_index[-self.dims :], self.sizes, self.outs)
        ]

    def read(self, out_index):
        at = [start + a.var for (start, _), a in zip(self.bounds(out_index), self.axes)]
        inside = te.all(*(i < end for i, (_, end) in zip(at, self.bounds(out_index))))
        clamped = [te.min(i, size - 1) for i, size in zip(at, self.sizes)]
        lead = out_index[: -self.dims]
        return self.x.at((*lead, *clamped)), clamped, inside

    def count(self, out_index):
        n = None
        for start, end in self.bounds(out_index):
            n = end - start if n is None else n * (end - start)
        return n


@lowers(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(ctx, node, x, output_size):
    shape = ctx.shape_of(node)
    w = AdaptiveWindow(ctx, x, 3, output_size)
    acc = opmath_dtype(w.x.dtype)

    def body(*i):
        v, _, inside = w.read(i)
        return te.sum(in_dtype(v, acc), axis=w.axes, where=inside)

    total = te.compute(shape, body, name=ctx.unique(f"adaptive_avgpool_{node.name}"))
    anchor = reduction_anchor(ctx, "window", [total], w.x.reads, shape, w.x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: total[tuple(ia)] / w.count(ia).astype(acc), w.x.dtype)


@lowers(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(ctx, node, x, output_size):
    shape, w = ctx.shape_of(node, 0), AdaptiveWindow(ctx, x, 3, output_size)
    return _max_over(ctx, node, w, shape, indices=later_outputs_read(node))


# eager on CPU targets, where it measured no faster than torch's (1 thread, 4 x 16 x 16 x 32 x 32
# to 5 x 7 x 7, one run of benchmarks/gathers.py: 2.16 ms against eager's 2.08; the average
# pool 0.74 against 0.80 stays a kernel); GPU targets take the kernel
eager_on_cpu(aten.adaptive_max_pool3d.default)


def longest_window(size, out):
    """The most input positions an adaptive window along `size` holds: exact for a known
    size; ceil(size / out) + 1 bounds it otherwise (a window ends under (i + 1) size / out + 1
    and starts over i size / out - 1)."""
    if isinstance(size, int):
        return max(-((-(i + 1) * size) // out) - (i * size) // out for i in range(out))
    return (size + out - 1) // out + 1
