"""Depthwise 2-d convolutions (groups = channels = filters) on the CPU with vectors along the
channels: the input padded and packed once into channel blocks [N][C / lanes][H'][W'][lanes],
the weights into [C / lanes][KH][KW][lanes], so each tap of the window is one vector load of
the input and one of the weights per `lanes` channels, whatever the image's width. The output
is the node's own NCHW value (the epilogue stores each tile along its rows, one channel at a
time)."""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.values import Anchor, Lazy, in_dtype, in_opmath, opmath_dtype


def wants_channel_vectors(ctx, w: torch.Tensor | None, groups: int, shape, padded, lanes: int):
    """Whether a convolution is depthwise with channels in whole vectors of `lanes` (0: none),
    a window of 5 x 5 or more, and a channel block's packed planes (`padded`: the padded
    input's (H', W')) within an eighth of L2. Elsewhere the direct schedule's vectors along the
    rows do as well or better. 1 thread, eager / ours, rows -> channel vectors, separate
    processes at load 8-10 (benchmarks/convs_depthwise.py): Zen 4, ConvNeXt's 7 x 7 at 28 /
    14 / 7 pixels 0.62 / 0.47 / 0.35 -> 0.95 / 0.82 / 0.88, EfficientNet's 5 x 5 of 240
    channels at 28 0.82 -> 1.09, of 1152 at 7 0.61 -> 1.17; AVX2 code 0.86 / 0.54 / 0.49 ->
    0.91 / 0.93 / 1.02. 3 x 3 ones lost (1152 at 7: 1.55 -> 1.24), as did 5 x 5 of stride 2
    at 56 (0.89 -> 0.78: 60 x 60 planes, 230 KB a block)."""
    if ctx.target.kind != "llvm" or w is None or not lanes or groups == 1:
        return False
    F, cg, KH, KW = w.shape
    if cg != 1 or F != groups or not all(isinstance(e, int) for e in (*shape, *padded)):
        return False
    block_bytes = padded[0] * padded[1] * lanes * 4
    return KH * KW >= 25 and block_bytes * 8 <= ctx.target.cache_bytes[1]


def depthwise_channel_vectors(
    ctx, node, padded: Lazy, w: torch.Tensor, shape, stride, dilation, dtype, lanes: int
) -> Lazy:
    """out[n, c, y, x] = sum_{ky, kx} packed[n, c / lanes, y sh + ky dh, x sw + kx dw, c % lanes]
    * wvec[c / lanes, ky, kx, c % lanes]: computed as [N][C / lanes][OH][OW][lanes] (the
    anchor), read back as the node's NCHW value. `packed` (the input zero-padded, its channels
    in blocks) is a stage of the same kernel, made one channel block at a time
    (schedules_cpu_products), so a block's planes are transposed while in cache."""
    _, _, KH, KW = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    N, C, HP, WP = padded.shape
    blocks = C // lanes
    packed_w = w.reshape(blocks, lanes, KH, KW).permute(0, 2, 3, 1).contiguous()
    weights = ctx.add_constant(packed_w, f"{node.name}_wdw")
    src = ctx.buffer(padded)

    def pack(n, cb, y, xx, lane):
        return src.at((n, cb * lanes + lane, y, xx))

    packed_shape = (N, blocks, HP, WP, lanes)
    packed = te.compute(packed_shape, pack, name=ctx.unique(f"{node.name}_pack"))
    acc = opmath_dtype(dtype)
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    _, _, OH, OW = shape

    def body(n, cb, y, xx, lane):
        v = packed[n, cb, y * sh + ry.var * dh, xx * sw + rx.var * dw, lane]
        wv = in_opmath(weights.at((cb, ry.var, rx.var, lane)))
        return te.sum(in_dtype(v, acc) * wv, axis=[ry, rx])

    conv = te.compute((N, blocks, OH, OW, lanes), body, name=ctx.unique(f"conv_{node.name}"))
    info = {
        "shape": shape,
        "stages": [conv],
        "groups": C,
        "depthwise": True,
        "lanes": lanes,
        "pack": packed,
    }
    anchor = Anchor("conv2d", conv, frozenset(src.reads | weights.reads), (node.name,), info)

    def at(ia):
        n, c, y, xx = ia
        return conv[n, c // lanes, y, xx, c % lanes]

    return ctx.anchored(anchor, at, dtype)
