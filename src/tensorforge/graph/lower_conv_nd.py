"""aten.convolution by its input's rank: 2-d (lower_conv.py), 1-d as the 2-d path over a unit
height (so it gets the same direct, im2col and tensor-core schedules), 3-d as a 2-d one over
its depth taps stacked as channels (a transposed one as a direct one of stride 1 over its
input spread out by the stride, with flipped weights)."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_conv import (
    conv_epilogue,
    conv_transpose_as_matmul,
    convolution_2d,
    filter_lanes,
    folded_weights,
    transposed_as_matmul,
)
from tensorforge.graph.lower_views import reshaped
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import (
    Anchor,
    Lazy,
    Unsupported,
    in_dtype,
    in_opmath,
    is_static,
    opmath_dtype,
)

aten = torch.ops.aten


@lowers(aten.convolution.default)
def convolution(
    ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    x = ctx.lazy(x)
    shape = ctx.shape_of(node)
    if x.ndim == 4:
        return convolution_2d(
            ctx, node, x, weight, bias, stride, padding, dilation, transposed, output_padding,
            groups, shape,
        )  # fmt: skip
    if x.ndim in (3, 5) and ctx.target.kind == "llvm" and not is_static((*x.shape, *shape)):
        # NOTE: at run-time sizes these took the 2-d path's generic schedule, 5x slower than
        # eager (1 thread: conv1d 80 -> 384 over 3000 13.6 ms against 2.7, conv3d 16 -> 16 over
        # 16 x 32 x 32 42 ms against 8.5); Dynamo's automatic dynamic shapes recompile a model
        # called at a second size this way
        raise Unsupported(f"a {x.ndim - 2}-d convolution of run-time sizes")
    if x.ndim == 3:  # (N, C, L) as (N, C, 1, L), its weights (F, C / groups, 1, K)
        w = ctx.lazy(weight)
        return convolution_2d(
            ctx, node, _unit_height(x), _unit_height(w), bias, (1, *stride), (0, *padding),
            (1, *dilation), transposed, (0, *output_padding), groups, _unit_height_shape(shape),
            lambda out: reshaped(out, shape),
        )  # fmt: skip
    if x.ndim == 5 and not transposed:
        return _conv3d(ctx, node, x, weight, bias, stride, padding, dilation, groups, shape)
    if x.ndim == 5:
        w = ctx.constant(weight)
        args = (stride, padding, dilation, output_padding, groups)
        if w is not None and transposed_as_matmul(ctx, w, *args):
            return conv_transpose_as_matmul(ctx, node, x, w, bias, ctx.dtype_of(node), shape, None)
        if spread_is_slower(ctx.target):
            raise Unsupported("a 3-d transposed convolution on the CPU (eager's is faster)")
        x, weight = _as_direct_3d(
            ctx, node, x, weight, stride, padding, dilation, output_padding, groups
        )
        return _conv3d(ctx, node, x, weight, bias, (1, 1, 1), (0, 0, 0), dilation, groups, shape)
    raise Unsupported(f"a {x.ndim - 2}-d{' transposed' if transposed else ''} convolution")


def _unit_height_shape(shape) -> tuple:
    return (*shape[:2], 1, shape[2])


def _unit_height(x: Lazy) -> Lazy:
    return reshaped(x, _unit_height_shape(x.shape))


def _conv3d(ctx, node, x: Lazy, weight, bias, stride, padding, dilation, groups, shape) -> Lazy:
    """A 3-d convolution as a 2-d one over its depth taps laid out as channels: the padded
    input's depth windows stacked, X2[n, c * KD + kz, z * HP + y, x] = X[n, c, z * sd + kz * dd,
    y, x] (KD copies of the input, where im2col makes KD * KH * KW), convolved in 2-d with the
    weights (F, C / groups * KD, KH, KW) (a reshape) over rows HP apart per output depth z (HP
    the padded height, rounded up to a whole stride); the rows between them are dropped."""
    N, C, D, H, W = x.shape
    w = ctx.lazy(weight)
    F, cg, KD, KH, KW = w.shape
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = stride, padding, dilation
    _, _, OD, OH, OW = shape
    constant = ctx.constant(weight)
    if constant is not None and groups == 1 and ctx.target.kind == "llvm" and OD * OH > 1:
        lanes = filter_lanes(ctx.target.vector_lanes(opmath_dtype(ctx.dtype_of(node))), F)
        if lanes > 1 and (KH, KW) != (1, 1):
            args = (stride, padding, dilation, shape, lanes)
            return _conv3d_filter_vectors(ctx, node, x, constant, bias, *args)
    HP = (H + 2 * ph + sh - 1) // sh * sh
    src = ctx.no_anchor(x)

    def at(idx):  # (n, c, kz, z, y, x): no divisions, contiguous along x
        n, c, kz, z, y, xx = idx
        iz, iy, ix = z * sd + kz * dd - pd, y - ph, xx - pw
        inside = te.all(iz >= 0, iz < D, iy >= 0, iy < H, ix >= 0, ix < W)
        clamped = [te.max(te.min(i, size - 1), 0) for i, size in ((iz, D), (iy, H), (ix, W))]
        v = src.at((n, c, *clamped))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    stacked = Lazy((N, C, KD, OD, HP, W + 2 * pw), x.dtype, at, src.reads, src.nodes, 3)
    stacked = ctx.materialize(stacked, node=f"{node.name}_depths")
    stacked = reshaped(stacked, (N, C * KD, OD * HP, W + 2 * pw))
    rows = (OD * HP - dh * (KH - 1) - 1) // sh + 1
    shape_2d = (N, F, rows, OW)

    def to_output(out: Lazy) -> Lazy:
        out = ctx.buffer(out)
        row_step = HP // sh
        return Lazy(
            shape,
            out.dtype,
            lambda idx: out.at((idx[0], idx[1], idx[2] * row_step + idx[3], idx[4])),
            out.reads,
            out.nodes,
            out.cost,
        )

    weight_2d = reshaped(w, (F, cg * KD, KH, KW))
    return convolution_2d(
        ctx, node, stacked, weight_2d, bias, (sh, sw), (0, 0), (dh, dw), False, (0, 0), groups,
        shape_2d, to_output,
    )  # fmt: skip


def _conv3d_filter_vectors(
    ctx, node, x: Lazy, w, bias, stride, padding, dilation, shape, lanes: int
) -> Lazy:
    """Direct, with vectors along the filters (lower_conv's 2-d form, its reduction over depth
    taps too): out[n, f, z * OH + y, x] over the zero-padded input, the weights packed once as
    [F / lanes][C][KD][KH][KW][lanes]. The output's depths and rows are one dimension, so the
    value is the node's as it lies (the stacked 2-d form computes rows between the depths and
    copies the output once more without them: a video stem 3 -> 32, 3 x 7 x 7 over 8 x 64 x 64,
    Zen 4 at 1 thread: 0.74x eager -> 0.82-0.88x, its AVX2 code 0.66x -> 0.76x; eager runs at
    the FMA units' peak there, our stem at ~90% of it, after a padding kernel)."""
    dtype = ctx.dtype_of(node)
    w, bias_value, folded = folded_weights(ctx, node, w, bias)
    N, C, D, H, W = x.shape
    F, _, KD, KH, KW = w.shape
    (sd, sh, sw), (dd, dh, dw) = stride, dilation
    _, _, OD, OH, OW = shape
    packed = w.reshape(F // lanes, lanes, C, KD, KH, KW).permute(0, 2, 3, 4, 5, 1).contiguous()
    weights = ctx.add_constant(packed, f"{node.name}_wvec")
    src = _padded_3d(ctx, node, x, padding)
    rc = te.reduce_axis((0, C), name="rc")
    rz = te.reduce_axis((0, KD), name="rz")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")

    def body(n, fo, row, xx, fi):
        z, y = row // OH, row % OH
        v = src.at((n, rc.var, z * sd + rz.var * dd, y * sh + ry.var * dh, xx * sw + rx.var * dw))
        wv = in_opmath(weights.at((fo, rc.var, rz.var, ry.var, rx.var, fi)))
        return te.sum(in_dtype(v, wv.dtype) * wv, axis=[rc, rz, ry, rx])

    rows = OD * OH
    conv = te.compute((N, F // lanes, rows, OW, lanes), body, name=ctx.unique(f"conv_{node.name}"))
    shape_2d = (N, F, rows, OW)
    info = {"shape": shape_2d, "stages": [conv], "groups": 1, "depthwise": False, "lanes": lanes}
    anchor = Anchor("conv2d", conv, frozenset(src.reads | weights.reads), (node.name,), info)
    out = ctx.anchored(
        anchor, lambda ia: conv[ia[0], ia[1] // lanes, ia[2], ia[3], ia[1] % lanes], dtype
    )
    to_output = lambda value: reshaped(value, shape)  # noqa: E731 (rows = depths x rows)
    return conv_epilogue(ctx, node, out, bias_value, folded, shape_2d, dtype, to_output)


def _padded_3d(ctx, node, x: Lazy, padding) -> Lazy:
    """The 5-d input in memory, zero-padded by `padding` (a kernel of its own if padded)."""
    if not any(padding):
        return ctx.buffer(x)
    N, C, D, H, W = x.shape
    pd, ph, pw = padding
    src = ctx.no_anchor(x)

    def pad(idx):
        n, c, z, y, xx = idx
        iz, iy, ix = z - pd, y - ph, xx - pw
        inside = te.all(iz >= 0, iz < D, iy >= 0, iy < H, ix >= 0, ix < W)
        clamped = [te.max(te.min(i, size - 1), 0) for i, size in ((iz, D), (iy, H), (ix, W))]
        v = src.at((n, c, *clamped))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    shape = (N, C, D + 2 * pd, H + 2 * ph, W + 2 * pw)
    return ctx.materialize(
        Lazy(shape, x.dtype, pad, src.reads, (), 2 + src.cost), node=f"{node.name}_pad"
    )


def _as_direct_3d(ctx, node, x: Lazy, weight, stride, padding, dilation, output_padding, groups):
    """A 3-d transposed convolution's (input, weights) as a direct convolution's of stride 1:
    the input with stride - 1 zeros between its elements, padded by dilation (K - 1) - padding
    (output_padding more after); the weights (C, F / groups, KD, KH, KW) flipped, their in and
    out channels swapped within each group."""
    w = ctx.lazy(weight)
    C, fg, *kernel = w.shape
    if not is_static(kernel):
        raise Unsupported("a transposed convolution whose kernel is a run-time size")
    pads = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    if min(pads) < 0:
        raise Unsupported("a transposed convolution padded past its kernel")
    N, _, *sizes = x.shape
    spread = [(size - 1) * s + 1 for size, s in zip(sizes, stride)]
    shape = (N, C, *[n + 2 * p + e for n, p, e in zip(spread, pads, output_padding)])
    src = ctx.no_anchor(x)

    def at(idx):
        inside, inner = [], []
        for i, p, s, n, size in zip(idx[2:], pads, stride, spread, sizes):
            i = i - p
            inside += [i >= 0, i < n] + ([i % s == 0] if s != 1 else [])
            inner.append(te.max(te.min(i // s if s != 1 else i, size - 1), 0))
        v = src.at((*idx[:2], *inner))
        return te.if_then_else(te.all(*inside), v, te.const(0, v.dtype))

    spread_x = Lazy(shape, x.dtype, at, src.reads, src.nodes, 3 + src.cost)
    spread_x = ctx.materialize(spread_x, node=f"{node.name}_spread")
    cg = C // groups
    constant = ctx.constant(weight)
    if constant is not None:
        flipped = constant.reshape(groups, cg, fg, *kernel).transpose(1, 2)
        flipped = flipped.reshape(groups * fg, cg, *kernel).flip(2, 3, 4).contiguous()
        return spread_x, ctx.add_constant(flipped, f"{node.name}_w")
    src_w = ctx.no_anchor(w)
    KD, KH, KW = kernel

    def flipped_at(idx):
        f, c, kz, ky, kx = idx
        return src_w.at(((f // fg) * cg + c, f % fg, KD - 1 - kz, KH - 1 - ky, KW - 1 - kx))

    flipped = Lazy((groups * fg, cg, *kernel), w.dtype, flipped_at, src_w.reads, src_w.nodes, 2)
    return spread_x, ctx.materialize(flipped, node=f"{node.name}_flipped")


def spread_is_slower(target) -> bool:
    """Does eager beat a 3-d transposed convolution over its spread input on `target`? On the
    CPU: 3x slower than eager (1 thread, 16 -> 16 over 8 x 16 x 16, kernel 3, stride 2: 7.2 ms
    against 2.5; benchmarks/gathers.py), the zeros between the input's elements multiplied too;
    CUDA targets take the kernel."""
    return target.kind == "llvm"
