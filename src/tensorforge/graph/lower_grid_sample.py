"""F.grid_sample over 2-d images and 3-d volumes (aten.grid_sampler_2d, _3d) as a gather: each
output element reads its grid point, maps it onto the input (align_corners; padding zeros,
border or reflection) and interpolates the input there (bilinear: 4 reads, 8 in 3-d; nearest:
1; bicubic, 2-d only: 16), as torch's GridSampler.h does. Reads outside the input are clamped
into it and masked to zero."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, opmath_dtype

aten = torch.ops.aten

MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
PADDINGS = {0: "zeros", 1: "border", 2: "reflection"}
CUBIC_A = -0.75  # torch's bicubic convolution constant


class Sampler:
    """Grid values of a spatial dimension of `size` elements (an expression: one table holds
    both dimensions) to input positions, with the padding applied."""

    def __init__(self, size, padding: str, align_corners: bool, dtype: str):
        self.size, self.padding, self.align, self.dtype = size, padding, align_corners, dtype

    def const(self, v):
        return te.const(v, self.dtype)

    def unnormalize(self, g):
        size = self.size
        if self.align:  # -1 and 1: the centers of the corner pixels
            return (g + self.const(1.0)) * self.const(0.5) * (size - self.const(1.0))
        return ((g + self.const(1.0)) * size - self.const(1.0)) * self.const(0.5)

    def clip(self, c):
        return te.min(te.max(c, self.const(0.0)), self.size - self.const(1.0))

    def reflect(self, c):
        """c reflected into [low, high] at the edges' pixel centers (align_corners) or outer
        borders; torch's reflect_coordinates."""
        size = self.size
        if self.align:
            low, high = self.const(0.0), size - self.const(1.0)
        else:
            low, high = self.const(-0.5), size - self.const(0.5)
        span = high - low
        c = te.abs(c - low)
        flips = te.floor(c / span)
        extra = c - flips * span  # fmod(c, span), c >= 0
        odd = flips - te.floor(flips * self.const(0.5)) * self.const(2.0) > self.const(0.5)
        reflected = te.if_then_else(odd, span - extra + low, extra + low)
        return te.if_then_else(span > self.const(0.0), reflected, self.const(0.0))

    def padded(self, c):
        """A position with the padding mode applied (zeros: unchanged)."""
        if self.padding == "border":
            return self.clip(c)
        if self.padding == "reflection":
            return self.clip(self.reflect(c))
        return c

    def source(self, c):
        """The input position c samples, padded (NaN and huge values: far outside, as torch's
        safe_downgrade_to_int_range)."""
        c = self.padded(c)
        return te.if_then_else(te.abs(c) < self.const(2.0**30), c, self.const(-100.0))


def _cubic_weights(t, const):
    """torch's cubic convolution coefficients at fraction t of the way from tap 1 to tap 2."""
    a = const(CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + const(2.0)) * x - (a + const(3.0))) * x * x + const(1.0)

    def far(x):  # 1 < |x| < 2
        return ((a * x - const(5.0) * a) * x + const(8.0) * a) * x - const(4.0) * a

    one = const(1.0)
    return [far(t + one), near(t), near(one - t), far(one - t + one)]


def _positions(ctx, node, grid, sizes, mode, padding, align_corners, acc):
    """A table (N, Ho, Wo, 2, K) (3-d: (N, Do, Ho, Wo, 3, K)) of where each grid point
    samples, along x then y (then z), computed once per point (not per channel; inlined, the
    padding's expressions would be repeated at every read): bilinear and nearest its padded
    position (K = 1); bicubic the fraction past its floor, then its 4 taps' padded positions
    (K = 5). `sizes`: the input's extents along x, y (, z)."""
    points = tuple(grid.shape[:-1])
    extents = [te.const(float(s), acc) if isinstance(s, int) else s.astype(acc) for s in sizes]

    def at(idx):
        *point, d, k = idx
        g = in_dtype(grid.at((*point, d)), acc)
        size = extents[-1]
        for axis in range(len(extents) - 2, -1, -1):
            size = te.if_then_else(d == axis, extents[axis], size)
        sampler = Sampler(size, padding, align_corners, acc)
        if mode != "bicubic":
            return sampler.source(sampler.unnormalize(g))
        u = sampler.unnormalize(g)  # bicubic pads each tap, not the point
        start = te.floor(u)
        tap = sampler.source(start + (k - 2).astype(acc))
        return te.if_then_else(k == 0, u - start, tap)

    shape = (*points, len(sizes), 5 if mode == "bicubic" else 1)
    return ctx.materialize(Lazy(shape, acc, at, grid.reads, grid.nodes + (node.name,), 12))


@lowers(aten.grid_sampler_2d.default)
def grid_sampler_2d(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    mode, padding = MODES.get(interpolation_mode), PADDINGS.get(padding_mode)
    if mode is None or padding is None:
        raise Unsupported(f"grid_sample mode {interpolation_mode} padding {padding_mode}")
    x, grid = ctx.buffer(x), ctx.lazy(grid)
    if x.ndim != 4 or grid.ndim != 4:
        raise Unsupported("grid_sampler_2d of other than 4-d input and grid")
    dtype = ctx.dtype_of(node)
    acc = opmath_dtype(dtype)
    H, W = x.shape[2], x.shape[3]
    table = _positions(ctx, node, grid, (W, H), mode, padding, align_corners, acc)

    def const(v):
        return te.const(v, acc)

    def read(n, c, iy, ix):
        """x at integer positions (int32 expressions), 0 outside."""
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        cy, cx = te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)
        v = in_dtype(x.at((n, c, cy, cx)), acc)
        return te.if_then_else(inside, v, const(0.0))

    def at(idx):
        return in_dtype(sample(*idx), dtype)

    def sample(n, c, h, w):
        fx, fy = table.at((n, h, w, 0, 0)), table.at((n, h, w, 1, 0))
        if mode == "nearest":
            return read(n, c, te.round(fy).astype("int32"), te.round(fx).astype("int32"))
        if mode == "bilinear":
            x0, y0 = te.floor(fx), te.floor(fy)
            tx, ty = fx - x0, fy - y0
            ix, iy = x0.astype("int32"), y0.astype("int32")
            one = const(1.0)
            top = read(n, c, iy, ix) * (one - tx) + read(n, c, iy, ix + 1) * tx
            bottom = read(n, c, iy + 1, ix) * (one - tx) + read(n, c, iy + 1, ix + 1) * tx
            return top * (one - ty) + bottom * ty
        wx, wy = _cubic_weights(fx, const), _cubic_weights(fy, const)
        total = None
        for j in range(4):
            py = table.at((n, h, w, 1, j + 1)).astype("int32")
            row = None
            for i in range(4):
                px = table.at((n, h, w, 0, i + 1)).astype("int32")
                term = read(n, c, py, px) * wx[i]
                row = term if row is None else row + term
            total = row * wy[j] if total is None else total + row * wy[j]
        return total

    cost = {"nearest": 4, "bilinear": 12, "bicubic": 40}[mode]
    nodes = x.nodes + table.nodes + (node.name,)
    return Lazy(ctx.shape_of(node), dtype, at, x.reads | table.reads, nodes, cost)


@lowers(aten.grid_sampler_3d.default)
def grid_sampler_3d(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    mode, padding = MODES.get(interpolation_mode), PADDINGS.get(padding_mode)
    if mode not in ("bilinear", "nearest") or padding is None:
        raise Unsupported(f"grid_sampler_3d mode {interpolation_mode} padding {padding_mode}")
    x, grid = ctx.buffer(x), ctx.lazy(grid)
    if x.ndim != 5 or grid.ndim != 5:
        raise Unsupported("grid_sampler_3d of other than 5-d input and grid")
    dtype = ctx.dtype_of(node)
    acc = opmath_dtype(dtype)
    D, H, W = x.shape[2:]
    table = _positions(ctx, node, grid, (W, H, D), mode, padding, align_corners, acc)
    one = te.const(1.0, acc)

    def read(n, c, iz, iy, ix):
        """x at integer positions (int32 expressions), 0 outside."""
        inside = te.all(iz >= 0, iz < D, iy >= 0, iy < H, ix >= 0, ix < W)
        cz, cy = te.max(te.min(iz, D - 1), 0), te.max(te.min(iy, H - 1), 0)
        cx = te.max(te.min(ix, W - 1), 0)
        v = in_dtype(x.at((n, c, cz, cy, cx)), acc)
        return te.if_then_else(inside, v, te.const(0.0, acc))

    def sample(n, c, d, h, w):
        fx, fy, fz = (table.at((n, d, h, w, axis, 0)) for axis in range(3))
        if mode == "nearest":
            ix, iy, iz = (te.round(f).astype("int32") for f in (fx, fy, fz))
            return read(n, c, iz, iy, ix)
        x0, y0, z0 = te.floor(fx), te.floor(fy), te.floor(fz)
        tx, ty, tz = fx - x0, fy - y0, fz - z0
        ix, iy, iz = x0.astype("int32"), y0.astype("int32"), z0.astype("int32")

        def plane(z):  # the bilinear sample of the plane at z
            top = read(n, c, z, iy, ix) * (one - tx) + read(n, c, z, iy, ix + 1) * tx
            bottom = read(n, c, z, iy + 1, ix) * (one - tx) + read(n, c, z, iy + 1, ix + 1) * tx
            return top * (one - ty) + bottom * ty

        return plane(iz) * (one - tz) + plane(iz + 1) * tz

    def at(idx):
        return in_dtype(sample(*idx), dtype)

    cost = {"nearest": 5, "bilinear": 24}[mode]
    nodes = x.nodes + table.nodes + (node.name,)
    return Lazy(ctx.shape_of(node), dtype, at, x.reads | table.reads, nodes, cost)


# eager on CPU targets, where torch's vectorized sampler is faster (1 thread, 8 x 16 x 64 x 64
# from a 64 x 64 grid, one run of benchmarks/gathers.py: bilinear 0.80 ms against eager's 0.67,
# nearest 0.27 against 0.26, bicubic 6.1 against 6.6); GPU targets take the kernel
eager_on_cpu(aten.grid_sampler_2d.default)
# 3-d stays a kernel there: eager's 3-d sampler is slower (1 thread, 4 x 16 x 16 x 32 x 32 from a
# 16 x 32 x 32 grid, load ~7: trilinear 11.9 ms against 4.9, nearest 5.6 against 4.1)
