"""A 2-d convolution's backward (aten.convolution_backward, a training graph's): the weights'
gradient as a matrix product of the output's gradient with the input's patches, where that
beats eager torch; the input's and bias's gradients run eagerly (oneDNN's) in one step."""

from __future__ import annotations

import types

import torch

from tensorforge import te
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Anchor, Lazy, Unsupported, is_static

aten = torch.ops.aten

# Output pixels (batch x height x width) up to which the weights' gradient is ours: eager's
# (oneDNN's) is slow where they are few and the weights many, fast where they are many.
# ResNet-18's convolutions, weight-gradient-only step (forward + backward), 1 thread, thread
# time, eager -> ours (load 1-3): 49 pixels (batch 1, 7 x 7): 256 -> 512 stride 2 4.93 ->
# 4.07 ms, 512 -> 512 7.92 -> 7.09, its 1 x 1 downsample 0.54 -> 0.55; 196 pixels: 128 -> 256
# stride 2 2.78 -> 3.12, 256 -> 256 5.67 -> 5.76; 392 (batch 8): 0.75-0.84x; 784 and more:
# 0.72-0.87x.
MOST_PIXELS = 100


def weight_gradient_is_ours(ctx, grad_out: Lazy, x: Lazy, weight: Lazy, groups, dilation) -> bool:
    """Whether a CPU convolution's weight gradient is our product (MOST_PIXELS): 2-d, float32,
    one group, no dilation, static sizes."""
    if ctx.target.kind != "llvm" or groups != 1 or any(d != 1 for d in dilation):
        return False
    if x.ndim != 4 or not all(is_static(v.shape) for v in (grad_out, x, weight)):
        return False
    if x.dtype != "float32":
        return False
    N, _, OH, OW = grad_out.shape
    return N * OH * OW <= MOST_PIXELS


@lowers(aten.convolution_backward.default)
def convolution_backward(
    ctx, node, grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask,
):  # fmt: skip
    if transposed or not output_mask[1]:
        raise Unsupported("a transposed convolution's backward, or one without weight gradient")
    if not weight_gradient_is_ours(ctx, grad_out, x, weight, groups, dilation):
        raise Unsupported("a weight gradient eager torch computes faster (many output pixels)")
    grad_weight = _weight_gradient(ctx, node, grad_out, x, weight.shape, stride, padding)
    rest = (output_mask[0], False, output_mask[2])
    grad_input = grad_bias = None
    if rest[0] or rest[2]:
        val = node.meta["val"]
        # the same node, with the weights' gradient left out of torch's step
        shim = types.SimpleNamespace(
            name=node.name,
            target=node.target,
            meta={"val": (val[0] if rest[0] else None, None, val[2] if rest[2] else None)},
            all_input_nodes=node.all_input_nodes,
        )
        args = (grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed)
        args += (output_padding, groups, list(rest))
        grad_input, _, grad_bias = ctx.eager(
            shim, args, {}, "the input's and bias's gradients of a convolution (oneDNN's)"
        )
    return grad_input, grad_weight, grad_bias


def _weight_gradient(ctx, node, grad_out: Lazy, x: Lazy, w_shape, stride, padding) -> Lazy:
    """dW[f, (c, ky, kx)] = sum_k G[f, k] * patches[k, (c, ky, kx)] over k = (n, y, x): the
    output's gradient read in place (rows along the pixels), the input's patches laid out
    once with the window positions contiguous (the product's vectors run along them)."""
    N, F, OH, OW = grad_out.shape
    _, C, H, W = x.shape
    _, _, KH, KW = w_shape
    (sh, sw), (ph, pw) = stride, padding
    P, R = OH * OW, C * KH * KW
    g = ctx.buffer(grad_out)
    src = ctx.no_anchor(x)

    def patch(idx):
        k, r = idx
        n, p = k // P, k % P
        c, tap = r // (KH * KW), r % (KH * KW)
        iy, ix = (p // OW) * sh + tap // KW - ph, (p % OW) * sw + tap % KW - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        v = src.at((n, c, te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    patches = Lazy((N * P, R), x.dtype, patch, src.reads, src.nodes, 3 + src.cost)
    patches = ctx.materialize(patches, node=f"{node.name}_patches")
    r = te.reduce_axis((0, N * P), name="k")

    def body(f, j):
        k = r.var
        return te.sum(g.at((k // P, f, (k % P) // OW, k % OW)) * patches.at((k, j)), axis=r)

    product = te.compute((F, R), body, name=ctx.unique(f"dw_{node.name}"))
    info = {"shape": (F, R), "stages": [product], "k": N * P}
    anchor = Anchor("matmul", product, frozenset(g.reads | patches.reads), (node.name,), info)
    taps = KH * KW
    # the anchor's (f, r) as the weights' (f, c, ky, kx)
    to_logical = lambda ia: (ia[0], ia[1] // taps, ia[1] % taps // KW, ia[1] % KW)  # noqa: E731
    return ctx.anchored(
        anchor, lambda ia: product[tuple(ia)], "float32", shape=w_shape, to_logical=to_logical
    )
