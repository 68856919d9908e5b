"""2-d convolution as an anchor: direct (vectors along the filters, or the auto-scheduler's
tiles), as a matrix product over im2col columns, split-K or tensor cores on CUDA; transposed
convolutions as direct ones over a dilated input (or, kernel = stride, a product); a batch norm
that follows is folded into constant weights and bias (lower_conv_nd.py: 1-d and 3-d)."""

from __future__ import annotations

import dataclasses
import operator

import torch

from tensorforge import te
from tensorforge.graph.lower_conv_depthwise import depthwise_channel_vectors, wants_channel_vectors
from tensorforge.graph.lower_conv_gemm import conv_split_k, im2col, positions
from tensorforge.graph.lower_conv_winograd import winograd_conv, winograd_tile
from tensorforge.graph.lower_cpu_dot import KIND as cpu_dot_kind
from tensorforge.graph.lower_cpu_dot import cpu_dot_bmm, wants_cpu_dot_bmm
from tensorforge.graph.lower_tensor_core import (
    TF32_MIN_MACS,
    tensor_core_conv,
    wants_tensor_core_conv,
)
from tensorforge.graph.lower_views import reshaped
from tensorforge.graph.split_k import cuda_conv_splits
from tensorforge.graph.values import (
    Anchor,
    Lazy,
    Unsupported,
    in_dtype,
    in_opmath,
    is_one,
    is_static,
    numel,
    opmath_dtype,
)
from tensorforge.ops import cpu_dot

aten = torch.ops.aten


def _folded_batch_norm(ctx, node):
    """The batch norm right after this convolution, if it can fold into the weights."""
    if len(node.users) != 1:
        return None
    (bn,) = node.users
    if bn.target is aten._native_batch_norm_legit_no_training.default:
        eps = bn.args[6]
    elif bn.target is aten.native_batch_norm.default and not bn.args[5]:
        eps = bn.args[7]
    else:
        return None
    if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in bn.users):
        return None
    params = [ctx.env.get(a) if isinstance(a, torch.fx.Node) else None for a in bn.args[1:5]]
    tensors = [ctx.constant(p) if p is not None else None for p in params]
    if tensors[2] is None or tensors[3] is None:
        return None
    if any(p is not None and t is None for p, t in zip(params, tensors)):
        return None
    return bn, tensors, eps


def folded_weights(ctx, node, w: torch.Tensor | None, bias):
    """(weights, bias value, the folded batch norm or None): the constant weights `w` (None:
    computed ones, which nothing folds into) scaled by the batch norm that follows the
    convolution, where one does, and the bias (shifted by it) as a value."""
    b = ctx.constant(bias) if bias is not None else None
    folded = (
        _folded_batch_norm(ctx, node) if w is not None and (bias is None or b is not None) else None
    )
    if folded is None:
        return w, (ctx.lazy(bias) if bias is not None else None), None
    bn, (gamma, beta, mean, var), eps = folded
    scale = torch.rsqrt(var.float() + eps)
    if gamma is not None:
        scale = scale * gamma
    w = w * scale.reshape(-1, *(1,) * (w.ndim - 1))
    b = ((b if b is not None else torch.zeros_like(mean)) - mean) * scale
    if beta is not None:
        b = b + beta
    return w, ctx.add_constant(b, f"{node.name}_b"), folded


def convolution_2d(
    ctx, node, x: Lazy, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups, shape, to_output=None,
):  # fmt: skip
    """aten.convolution of a 4-d input to `shape` (4-d); `to_output` views that value as the
    node's own (a 1-d convolution's unit height dropped) before a folded batch norm takes it."""
    dtype = ctx.dtype_of(node)
    w_shape = ctx.lazy(weight).shape
    on_dot = ctx.constant(weight) is not None and wants_dot_conv(
        ctx.target, dtype, w_shape, shape, stride, padding, groups
    )
    if (
        not transposed
        and not on_dot
        and eager_bfloat16_conv(ctx.target, dtype, groups, w_shape, shape)
    ):
        raise Unsupported(
            "a bfloat16 convolution on a CPU with the bfloat16 dot instruction (eager torch's"
            " oneDNN kernel, on that instruction, is faster)"
        )
    w = ctx.constant(weight)
    if w is None and ctx.target.kind == "cuda" and _macs(shape, w_shape) >= CUDNN_MIN_MACS:
        # NOTE: a training graph's convolutions (weights are its inputs) take none of the
        # constant-weight paths (tensor cores, split-K): the direct first guess ran ResNet-18's
        # forward convolutions 2-4x slower than cuDNN (H200, batch 8, 0.67 ms for a 3x3 at 28²)
        raise Unsupported(
            "a convolution with run-time weights on CUDA (cuDNN's, eagerly, is faster)"
        )
    if transposed:
        w_shape = ctx.lazy(weight).shape
        if w is not None and transposed_as_matmul(
            ctx, w, stride, padding, dilation, output_padding, groups
        ):
            return conv_transpose_as_matmul(ctx, node, x, w, bias, dtype, shape, to_output)
        x = _dilated_input(ctx, node, x, w_shape, stride, padding, dilation, output_padding)
        if w is not None:
            w = _flipped(w, groups)
        else:
            weight = _flipped_weights(ctx, node, ctx.lazy(weight), groups)
        stride, padding = (1, 1), (0, 0)
    w, bias_value, folded = folded_weights(ctx, node, w, bias)
    m = winograd_tile(ctx, w, shape, stride, dilation, groups, dtype)
    if m:  # (the rule and its measurements: lower_conv_winograd.winograd_tile)
        out = winograd_conv(ctx, node, x, w, shape, padding, dtype, m)
        return conv_epilogue(ctx, node, out, bias_value, folded, shape, dtype, to_output)
    weight = ctx.add_constant(w, f"{node.name}_w") if w is not None else ctx.buffer(weight)
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    N, C, H, W = x.shape
    F, cg, KH, KW = weight.shape
    fg = F // groups
    epilogue = lambda out: conv_epilogue(  # noqa: E731
        ctx, node, out, bias_value, folded, shape, dtype, to_output
    )
    acc = opmath_dtype(dtype)
    full = ctx.target.vector_lanes(acc) if ctx.target.kind == "llvm" else 0
    lanes = filter_lanes(full, F) if full else 0
    padded_size = (H + 2 * padding[0], W + 2 * padding[1])
    if wants_channel_vectors(ctx, w, groups, shape, padded_size, lanes):
        padded = _padded(ctx, node, x, padding)
        out = depthwise_channel_vectors(ctx, node, padded, w, shape, stride, dilation, dtype, lanes)
        return epilogue(out)
    if groups == 1 and lanes > 1 and _filter_vectors(KH, KW, stride, shape, full):
        if w is not None or _packs_weights_at_run_time(ctx, weight, shape):
            packed = _filter_vector_weights(ctx, node, w if w is not None else weight, lanes)
            out = _conv_filter_vectors(
                ctx, node, x, packed, shape, stride, padding, dilation, dtype, lanes
            )
            return epilogue(out)
    splits = cuda_conv_splits(ctx.target, shape, C, KH * KW, dtype) if w is not None else 0
    # TF32 for large convolutions only: below TF32_MIN_MACS float32's own schedules (direct,
    # split-K staged) beat im2col + TF32. H100, fp32 ResNet-18, GPU time a call: its 231M
    # layers in TF32 (2^28 -> 2^27) batch 2 531 -> 359 us, batch 4 597 -> 527; its 115M ones too
    # (2^26) batch 1 331 -> 261 (session 14, before the tensor-core tiles no thinner than the
    # rows: 332 against 380 with every convolution in TF32); its 58M stage entries stay direct
    macs = numel(shape) * C * KH * KW if is_static(shape) else 0
    tf32 = ctx.precision.conv_tf32 and macs >= TF32_MIN_MACS
    if wants_tensor_core_conv(ctx.target, dtype, shape, groups, C * KH * KW, w is not None, tf32):
        out = tensor_core_conv(ctx, node, x, w, shape, stride, padding, dilation, dtype)
        return epilogue(out)
    if groups == 1 and splits:
        out = conv_split_k(ctx, node, x, w, shape, stride, padding, dilation, dtype, splits)
        return epilogue(out)
    if w is not None and not transposed and on_dot:
        out = conv_1x1_on_dot(ctx, node, x, w, shape)
        return epilogue(out)
    if w is not None and groups == 1 and _as_matmul(ctx, shape, stride, KH, KW):
        out = _conv_as_matmul(ctx, node, x, w, shape, stride, padding, dilation, dtype)
        return epilogue(out)
    x = _padded(ctx, node, ctx.buffer(x), padding)
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")

    def body(n, f, y, xx):
        c = rc.var if groups == 1 else (f // fg) * cg + rc.var
        v = x.at((n, c, y * sh + ry.var * dh, xx * sw + rx.var * dw))
        product = in_dtype(v, acc) * in_dtype(weight.at((f, rc.var, ry.var, rx.var)), acc)
        return te.sum(product, axis=[rc, ry, rx])

    conv = te.compute(shape, body, name=ctx.unique(f"conv_{node.name}"))
    info = {"shape": shape, "stages": [conv], "groups": groups, "depthwise": cg == 1}
    anchor = Anchor("conv2d", conv, frozenset(x.reads | weight.reads), (node.name,), info)
    return epilogue(ctx.anchored(anchor, lambda ia: conv[tuple(ia)], dtype))


CUDNN_MIN_MACS = 1 << 22  # smaller CUDA convolutions with run-time weights stay kernels


def _macs(shape, w_shape) -> int:
    """Multiply-adds of a convolution to `shape` with weights of `w_shape` (0 where a size is
    known only at run time)."""
    if not is_static(shape) or not is_static(w_shape):
        return 0
    return numel(shape) * numel(w_shape[1:])


def eager_bfloat16_conv(target, dtype: str, groups: int, w_shape, shape) -> bool:
    """Leave a bfloat16 convolution to eager torch on a CPU target with AVX512-BF16? oneDNN's
    kernels multiply on `vdpbf16ps`, twice float32's rate; ours compute in float32. Zen 4, 1
    thread, batch 1, conv + BN + ReLU, eager / ours (its conv a kernel): 3x3 64 -> 64 at 56²
    0.53, 128 at 28² 0.49, 512 at 7² 0.61, stride 2 0.49, the 7x7 stem 0.82, 1x1 at ResNet-50's
    deeper stages 0.46-0.72 (1024 -> 256 at 14² 0.55, 512 -> 2048 at 7² 0.46); eager / ours
    (its conv eager) 0.86-0.98, and the rest of a model fused: ResNet-18 0.90 -> 1.35x eager.
    Small convolutions stay kernels (an eager step costs ~15 us more than a kernel's call), as
    do depthwise ones (1.6-2.3x eager)."""
    if target.kind != "llvm" or dtype != "bfloat16" or groups != 1 or not is_static(shape):
        return False
    if numel(shape) * numel(w_shape[1:]) < EAGER_BFLOAT16_MACS:
        return False
    return cpu_dot.has_feature(cpu_dot_kind, target)


EAGER_BFLOAT16_MACS = 1 << 23  # ~0.1 ms of eager's on Zen 4


def transposed_as_matmul(ctx, w, stride, padding, dilation, output_padding, groups) -> bool:
    """A transposed convolution (2-d or 3-d) whose kernel equals its stride (UNet's 2 x 2,
    stride 2): each input pixel writes its own output block, a matrix product (no overlap, no
    zeros)."""
    return (
        ctx.target.kind == "llvm"
        and groups == 1
        and tuple(stride) == tuple(w.shape[2:])
        and not any(padding)
        and not any(output_padding)
        and all(d == 1 for d in dilation)
    )


def conv_transpose_as_matmul(
    ctx, node, x: Lazy, w: torch.Tensor, bias, dtype, out_shape, to_output
) -> Lazy:
    """out[n, f, y, x] = sum_c in[n, c, y / s, x / s] * w[c, f, y % s, x % s]: a 1 x 1
    convolution to F * s * s channels (f, ky, kx), read back as the s x s blocks (3-d: the
    input's depth and rows as one dimension, s x s x s blocks)."""
    C, F, *kernel = w.shape
    N, _, *sizes = x.shape
    taps, rows = 1, 1
    for k in kernel:
        taps *= k
    for size in sizes[:-1]:
        rows = rows * size
    blocks = w.permute(1, *range(2, w.ndim), 0).reshape(F * taps, C, 1, 1)
    shape = (N, F * taps, rows, sizes[-1])
    x = reshaped(x, (N, C, rows, sizes[-1])) if len(sizes) != 2 else x
    product = _conv_as_matmul(ctx, node, x, blocks, shape, (1, 1), (0, 0), (1, 1), dtype)
    product = ctx.buffer(product)

    def at(idx):
        n, f, *position = idx
        tap, row = f, 0
        for p, k in zip(position, kernel):
            tap = tap * k + p % k
        for p, k, size in zip(position[:-1], kernel, sizes):
            row = row * size + p // k
        return product.at((n, tap, row, position[-1] // kernel[-1]))

    out = Lazy(out_shape, dtype, at, product.reads, product.nodes, 3)
    bias_value = ctx.lazy(bias) if bias is not None else None
    return conv_epilogue(ctx, node, out, bias_value, None, out_shape, dtype, to_output)


def _flipped(w: torch.Tensor, groups: int) -> torch.Tensor:
    """A transposed convolution's weights (C, F / groups, KH, KW) as a direct one's: flipped,
    their in and out channels swapped within each group."""
    C, fg, KH, KW = w.shape
    flipped = w.reshape(groups, C // groups, fg, KH, KW).transpose(1, 2)
    return flipped.reshape(groups * fg, C // groups, KH, KW).flip(2, 3).contiguous()


def _flipped_weights(ctx, node, w: Lazy, groups: int) -> Lazy:
    """`_flipped` of weights computed in the graph, as a kernel of their own."""
    C, fg, KH, KW = w.shape
    cg = C // groups
    src = ctx.no_anchor(w)

    def at(idx):
        f, c, ky, kx = idx
        return src.at(((f // fg) * cg + c, f % fg, KH - 1 - ky, KW - 1 - kx))

    flipped = Lazy((groups * fg, cg, KH, KW), w.dtype, at, src.reads, src.nodes, 1 + src.cost)
    return ctx.materialize(flipped, node=f"{node.name}_flipped")


def _dilated_input(ctx, node, x: Lazy, w_shape, stride, padding, dilation, extra) -> Lazy:
    """A transposed convolution as a direct one of stride 1 (over `_flipped` weights): the
    input with stride - 1 zeros between its pixels, padded by dilation * (K - 1) - padding (and
    output_padding after)."""
    N, C, H, W = x.shape
    KH, KW = w_shape[2:]
    if not is_static((KH, KW)):  # (weights that are an input under dynamic=True)
        raise Unsupported("a transposed convolution whose kernel is a run-time size")
    (sh, sw), (dh, dw) = stride, dilation
    py, px = dh * (KH - 1) - padding[0], dw * (KW - 1) - padding[1]
    if py < 0 or px < 0:
        raise Unsupported("a transposed convolution padded past its kernel")
    shape = (N, C, (H - 1) * sh + 1 + 2 * py + extra[0], (W - 1) * sw + 1 + 2 * px + extra[1])
    src = ctx.no_anchor(x)

    def at(idx):
        n, c, y, xx = idx
        iy, ix = y - py, xx - px
        inside = te.all(
            iy >= 0,
            iy % sh == 0,
            iy < (H - 1) * sh + 1,
            ix >= 0,
            ix % sw == 0,
            ix < (W - 1) * sw + 1,
        )
        v = src.at((n, c, te.max(te.min(iy // sh, H - 1), 0), te.max(te.min(ix // sw, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    dilated = Lazy(shape, x.dtype, at, src.reads, src.nodes, 3 + src.cost)
    return ctx.materialize(dilated, node=f"{node.name}_dilated")


def conv_epilogue(ctx, node, out: Lazy, bias_value, folded, shape, dtype, to_output) -> Lazy:
    """Bias (the folded batch norm's shift included) added to the convolution's output, viewed
    as the node's value by `to_output` (where not None)."""
    if bias_value is not None:
        out = ctx.pointwise(
            lambda c, d: c + d,
            [out, _per_channel(bias_value, len(shape))],
            shape=shape,
            dtype=dtype,
        )
    if to_output is not None:
        out = to_output(out)
    if folded is not None:
        out = dataclasses.replace(out, nodes=out.nodes + (folded[0].name,))
        ctx.replaced[folded[0]] = (out, None, None)
    return out


def _filter_vectors(KH: int, KW: int, stride, shape, target_lanes: int) -> bool:
    """Direct, vectors along the filters? All but the 1 x 1 convolutions of stride 1 (matrix
    products of the input as it lies in memory), strided ones of more output pixels than four
    of the product's column panels (products over the pixels gathered once), and those of one
    output row (a 1-d convolution: its im2col columns are a small copy and the product's
    panels run along the whole row; Whisper's 80 -> 384 over 3000, 1 thread: 6.8 -> 3.4 ms,
    eager 5.8). ResNet-50's downsamples at 1 thread, eager / ours, direct -> product: 256 ->
    512 at 56 (784 pixels) Zen 4 0.99 -> 1.12, its AVX2 code 0.67 -> 1.16; at 7 x 7 pixels
    the product lost (1024 -> 2048, Zen 4: 1.65 -> 1.08); at run-time sizes too (3.2 ms, as
    a product 15)."""
    if (KH, KW) == (1, 1):
        if tuple(stride) == (1, 1):
            return False
        pixels = shape[2] * shape[3]
        if is_static(shape) and pixels > 4 * 2 * target_lanes:  # (2 vectors a panel)
            return False
    return not is_one(shape[2])


def filter_lanes(target_lanes: int, filters: int) -> int:
    """Lanes of the filter vectors: the target's full vector, or a half or quarter of it (a ymm
    or xmm register on AVX-512) where that is what divides the filters; 0 where none of 4 lanes
    or more does (8 or 24 filters take 8-lane vectors on a 16-lane target), or the filters are a
    run-time size (weights that are an input under dynamic=True)."""
    if not isinstance(filters, int):
        return 0
    lanes = target_lanes
    while lanes >= 4 and filters % lanes:
        lanes //= 2
    return lanes if lanes >= 4 and lanes * 4 >= target_lanes else 0


def _packs_weights_at_run_time(ctx, weight, shape) -> bool:
    """Whether a CPU convolution whose weights are known only at run time (a training graph's)
    packs them into vectors along the filters as it runs (`_filter_vector_weights`): static
    sizes only."""
    if ctx.target.kind != "llvm" or not isinstance(weight, Lazy):
        return False
    return is_static(weight.shape) and is_static(shape)


def _filter_vector_weights(ctx, node, w, lanes: int) -> Lazy:
    """Weights (F, C, KH, KW) as [F / lanes][C][KH][KW][lanes]: constant ones packed once at
    compile time, ones known only at run time (`w` a value) by a small kernel of their own each
    call (the matmuls' `_packed_panels` of lower_linalg)."""
    if isinstance(w, torch.Tensor):
        F, C, KH, KW = w.shape
        packed = w.reshape(F // lanes, lanes, C, KH, KW).permute(0, 2, 3, 4, 1).contiguous()
        return ctx.add_constant(packed, f"{node.name}_wvec")
    src = ctx.no_anchor(w)
    F, C, KH, KW = src.shape

    def at(idx):
        fo, c, ky, kx, fi = idx
        return src.at((fo * lanes + fi, c, ky, kx))

    packed = Lazy((F // lanes, C, KH, KW, lanes), src.dtype, at, src.reads, src.nodes, 1 + src.cost)
    return ctx.materialize(packed, node=f"{node.name}_wvec")


def _conv_filter_vectors(
    ctx, node, x: Lazy, weights: Lazy, shape, stride, padding, dilation, dtype, lanes: int
):
    """Direct convolution with vectors along the filters: the weights packed as
    [F / lanes][C][KH][KW][lanes] (`_filter_vector_weights`), so each step of the reduction
    broadcasts one input value per output column and loads one weight vector per `lanes`
    filters. Any output width and stride fills the vectors (the direct schedule along rows
    needs rows of whole vectors)."""
    N, C, H, W = x.shape
    fv, _, KH, KW, _ = weights.shape
    F = fv * lanes
    (sh, sw), (dh, dw) = stride, dilation
    src = _padded(ctx, node, x, padding)
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    _, _, OH, OW = shape

    def body(n, fo, y, xx, fi):
        v = src.at((n, rc.var, y * sh + ry.var * dh, xx * sw + rx.var * dw))
        w = in_opmath(weights.at((fo, rc.var, ry.var, rx.var, fi)))
        return te.sum(in_dtype(v, w.dtype) * w, axis=[rc, ry, rx])

    conv = te.compute((N, F // lanes, OH, OW, lanes), body, name=ctx.unique(f"conv_{node.name}"))
    info = {"shape": shape, "stages": [conv], "groups": 1, "depthwise": False, "lanes": lanes}
    info["taps"] = KH * KW
    info["packed_at_run_time"] = weights.source is None or weights.source.kind != "constant"
    anchor = Anchor("conv2d", conv, frozenset(src.reads | weights.reads), (node.name,), info)

    def at(ia):
        n, f, y, xx = ia
        return conv[n, f // lanes, y, xx, f % lanes]

    return ctx.anchored(anchor, at, dtype)


def _padded(ctx, node, x: Lazy, padding) -> Lazy:
    """The input in memory, zero-padded by `padding` (a kernel of its own if padded)."""
    ph, pw = padding
    if not (ph or pw):
        return ctx.buffer(x)
    N, C, H, W = x.shape
    src = ctx.no_anchor(x)

    def pad(idx):
        n, c, y, xx = idx
        iy, ix = y - ph, xx - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        v = src.at((n, c, te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    shape = (N, C, H + 2 * ph, W + 2 * pw)
    return ctx.materialize(
        Lazy(shape, x.dtype, pad, src.reads, (), 2 + src.cost), node=f"{node.name}_pad"
    )


def _as_matmul(ctx, shape, stride, KH: int, KW: int) -> bool:
    """Compute this convolution as a matrix product over im2col columns? Where output rows are
    short (a direct schedule's vectors along a row would be mostly empty), strided (its vector
    loads would be gathers), or the kernel is 1 x 1 (it is a matrix product already)."""
    if ctx.target.kind != "llvm":
        return False
    OW = shape[3]
    lanes = ctx.target.vector_lanes("float32")
    tile = lanes * (-(-OW // lanes) if isinstance(OW, int) and OW <= 4 * lanes else 3)
    return (
        (KH == 1 and KW == 1)
        or is_one(shape[2])  # one output row (a 1-d convolution): see _filter_vectors
        or tuple(stride) != (1, 1)
        or not isinstance(OW, int)
        or OW < 2 * lanes
        or OW % tile != 0  # the direct schedule's partial row tile is guarded throughout
    )


def _conv_as_matmul(ctx, node, x: Lazy, w: torch.Tensor, shape, stride, padding, dilation, dtype):
    """out[n, f, p] = sum_r W[f, r] * col[n, r, p], p = y * OW + x, r = (c, ky, kx): the
    weights are the left matrix (rows of filters), the input's patches the right one, laid out
    once (im2col) so the micro-kernel reads them as contiguous vectors along p."""
    N = x.shape[0]
    F, C, KH, KW = w.shape  # (the weights' C: static where the input's is a run-time size)
    _, _, OH, OW = shape
    K, P = C * KH * KW, OH * OW
    acc = opmath_dtype(dtype)
    weights = ctx.add_constant(w.reshape(F, K), f"{node.name}_wmat")
    col, col_at = im2col(ctx, node, x, w.shape, shape, stride, padding, dilation)
    r = te.reduce_axis((0, K), name="k")
    C_ = te.compute(
        (N, F, P),
        lambda n, f, p: te.sum(
            in_dtype(weights.at((f, r.var)), acc) * in_dtype(col_at(n, r.var, p), acc), axis=r
        ),
        name=ctx.unique(f"conv_{node.name}"),
    )
    info = {"shape": (N, F, P), "stages": [C_], "k": K}
    anchor = Anchor("matmul", C_, frozenset(col.reads | weights.reads), (node.name,), info)
    return ctx.anchored(
        anchor, lambda ia: C_[tuple(ia)], dtype, shape=shape, to_logical=positions(OW)
    )


DOT_CONV = True


def wants_dot_conv(target, dtype: str, w_shape, shape, stride, padding, groups: int) -> bool:
    """A bfloat16 1x1 convolution (stride 1, no padding) with constant weights on the dot
    micro-kernel (DOT_CONV): filters x channels (the weights, read in place) times channels x positions
    (the input, packed into the kernel's panels as it runs), for a target with AVX512-BF16."""
    F, _, KH, KW = w_shape
    if not DOT_CONV or (KH, KW) != (1, 1) or tuple(stride) != (1, 1) or any(padding) or groups != 1:
        return False
    if not is_static(shape):
        return False
    N, _, OH, OW = shape
    return wants_cpu_dot_bmm(target, dtype, (N, F, OH * OW), w_shape[1])


def conv_1x1_on_dot(ctx, node, x: Lazy, w: torch.Tensor, shape) -> Lazy:
    """out[n, f, p] = sum_c W[f, c] * x[n, c, p], p = y * W + x: lower_cpu_dot's batched
    product, its left matrix the (folded) weights for every image, its right one the image."""
    N, F, OH, OW = shape
    C = w.shape[1]
    weights = ctx.add_constant(w.reshape(F, C).to(torch.bfloat16), f"{node.name}_wdot")
    filters = Lazy((N, F, C), "bfloat16", lambda idx: weights.at(idx[1:]), weights.reads)
    image = reshaped(ctx.view_of_memory(x), (N, C, OH * OW))  # (an anchor: materialized)
    return cpu_dot_bmm(
        ctx, node, filters, image, (N, F, OH * OW), ctx.dtype_of(node), shape, positions(OW)
    )


def _per_channel(v: Lazy, ndim: int) -> Lazy:
    """A [C] vector as [C, 1, 1] (more 1s for an NCDHW output), broadcasting over the output."""
    (c,) = v.shape
    shape = (c,) + (1,) * (ndim - 2)
    return Lazy(shape, v.dtype, lambda idx: v.at((idx[0],)), v.reads, v.nodes, v.cost)
