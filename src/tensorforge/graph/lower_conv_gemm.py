"""Convolutions as matrix products over im2col columns: the columns themselves, and on CUDA the
split-K form for convolutions, and for products, whose outputs are too few to fill the GPU.

The split-K form is two kernels after the columns. The first is a batched product,
partial[z, n, f, p] = sum over the z-th slice of the reduction (c, ky, kx) of W * col, which the
auto-scheduler's GPU first guess stages through shared memory (its blocks span the slices, so
a 7 x 7 x 512 layer runs on 256 blocks rather than 8 tiles' worth). The second sums the slices
per output, one thread each, and carries the convolution's epilogue (bias, the folded batch
norm, the residual add, ReLU). A product of few tiles (GPT-2's projections at 128 tokens) is
split the same way over slices of its k, without columns (`matmul_split_k`).
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.split_k import SPLIT_CONV_TILE
from tensorforge.graph.values import Anchor, Lazy, in_opmath, opmath_dtype
from tensorforge.ops.matmul import round_up
from tensorforge.tune.auto.analytic_gpu import K_SLICE


def im2col(
    ctx, node, x: Lazy, w_shape, shape, stride, padding, dilation, columns=None, depth=None,
    k_group=0,
):  # fmt: skip
    """col(n, r, p) = the input under filter tap r = (c, ky, kx) at output position
    p = y * OW + x, as an index function: a view of the input for a plain 1 x 1 convolution,
    else read from a materialized (N, depth, columns) buffer (C * KH * KW x OH * OW, or more:
    zeros past them); with `k_group`, always materialized as (N, depth / k_group, columns,
    k_group): each position's taps in contiguous runs of k_group (TF32 wgmma reads its right
    operand K-major only, 16 bytes at a time), a run's positions side by side (coalesced
    reads of the input and writes of the columns)."""
    N, C, H, W = x.shape
    _, _, KH, KW = w_shape
    _, _, OH, OW = shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    K, P = C * KH * KW, OH * OW
    columns = P if columns is None else columns
    depth = K if depth is None else depth
    plain = KH == KW == 1 and (sh, sw) == (1, 1) and (ph, pw) == (0, 0)
    if plain and (depth, columns) == (K, P) and not k_group:  # the input is the columns already
        col = ctx.buffer(x)
        return col, lambda n, r, p: col.at((n, r, p // OW, p % OW))
    src = ctx.buffer(x)
    # NOTE: `is`: a run-time P (dynamic=True) has no truth value for `P > P`
    wide, deep = columns is not P and columns > P, depth is not K and depth > K
    padded = ph or pw or wide or deep

    def patch(idx):
        n, r, p = idx
        c, ky, kx = r // (KH * KW), r // KW % KH, r % KW
        iy, ix = p // OW * sh - ph + ky * dh, p % OW * sw - pw + kx * dw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        if wide:
            inside = te.all(inside, p < P)
        if deep:
            inside, c = te.all(inside, r < K), te.min(c, C - 1)
        v = src.at((n, c, te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype)) if padded else v

    if k_group:
        g = k_group
        shape = (N, depth // g, columns, g)
        cols = Lazy(
            shape, x.dtype, lambda i: patch((i[0], i[1] * g + i[3], i[2])), src.reads, (), 2
        )
        col = ctx.materialize(cols, node=f"{node.name}_im2col")
        return col, lambda n, r, p: col.at((n, r // g, p, r % g))
    cols = Lazy((N, depth, columns), x.dtype, patch, src.reads, (), 2)
    col = ctx.materialize(cols, node=f"{node.name}_im2col")
    return col, lambda n, r, p: col.at((n, r, p))


def positions(width: int):
    """An index (n, f, p) of a product over im2col positions p = y * width + x, as the
    convolution's output index (n, f, y, x): the `to_logical` of such a product's value."""
    return lambda ia: (ia[0], ia[1], ia[2] // width, ia[2] % width)


def conv_split_k(
    ctx, node, x: Lazy, w: torch.Tensor, shape, stride, padding, dilation, dtype, splits: int
) -> Lazy:
    """The convolution as `splits` partial products over slices of its reduction (a kernel,
    staged in shared memory), summed per output by a second kernel that the epilogue joins.
    The product's sides are zero-padded to whole block tiles (filters in the constant weights,
    positions in the columns): its fetches are then whole float4 rows and its FMAs unguarded,
    where a tail guarded every one (28 x 28 x 128: 63 us). With one slice (an image stem) the
    reduction is padded to whole 16-term slices and the second kernel is the epilogue alone."""
    N, F, OH, OW = shape
    K, P = w[0].numel(), OH * OW
    rows, columns = round_up(F, SPLIT_CONV_TILE), round_up(P, SPLIT_CONV_TILE)
    depth = K if splits > 1 else round_up(K, K_SLICE)  # an image stem's 3 x 7 x 7: 160 terms
    part = depth // splits
    col, col_at = im2col(ctx, node, x, w.shape, shape, stride, padding, dilation, columns, depth)
    # (Z, rows, part): each slice's weights a matrix of its own, rows contiguous along k
    slices = torch.zeros(rows, depth, dtype=w.dtype)
    slices[:F, :K] = w.reshape(F, K)
    slices = slices.reshape(rows, splits, part).permute(1, 0, 2)
    weights = ctx.add_constant(slices, f"{node.name}_wsplit")
    k = te.reduce_axis((0, part), name="k")
    partial = te.compute(
        (splits, N, rows, columns),
        lambda z, n, f, p: te.sum(
            _product(weights.at((z, f, k.var)), col_at(n, z * part + k.var, p)), axis=k
        ),
        name=ctx.unique(f"conv_{node.name}_partial"),
    )
    reads = col.reads | weights.reads
    return _sum_of_slices(
        ctx, node, partial, part, reads, shape, dtype, lambda n, f, y, xx: (n, f, y * OW + xx)
    )


def matmul_split_k(ctx, node, a: Lazy, b: torch.Tensor, shape, dtype, splits: int) -> Lazy:
    """C[..., i, j] = sum_k A[..., i, k] B[k, j] (B constant) as `splits` partial products over
    slices of k (the staged first guess, its blocks spanning the slices) and their sum, which
    the epilogue joins: a product of few output tiles (GPT-2's projections at 128 tokens)."""
    k_all = b.shape[0]
    part = k_all // splits
    # (Z, part, m): each slice's rows of B, contiguous along j
    weights = ctx.add_constant(b.reshape(splits, part, b.shape[1]), f"{node.name}_bsplit")
    k = te.reduce_axis((0, part), name="k")
    partial = te.compute(
        (splits, *shape),
        lambda *idx: te.sum(  # (z, ..., i, j)
            _product(
                a.at((*idx[1:-1], idx[0] * part + k.var)), weights.at((idx[0], k.var, idx[-1]))
            ),
            axis=k,
        ),
        name=ctx.unique(f"mm_{node.name}_partial"),
    )
    return _sum_of_slices(ctx, node, partial, part, a.reads | weights.reads, shape, dtype, None)


def _product(a, b):
    """a * b in float32 where either is a half type (the partial sums accumulate in it)."""
    return in_opmath(a) * in_opmath(b)


def _sum_of_slices(ctx, node, partial, part: int, reads, shape, dtype, index) -> Lazy:
    """The partial products as a kernel of their own (the auto-scheduler's staged GEMM:
    `split_k` anchors), and their sum over the slices as an anchor the epilogue joins; `index`
    maps an output index into the partials' (after the slice), the same where None. The
    partials of a half product stay float32 in memory; their sum is rounded once."""
    splits, *space = (int(e.value) for e in partial.shape)
    info = {"shape": (splits, *space), "stages": [partial], "k": part, "split_k": True}
    product = Anchor("matmul", partial, frozenset(reads), (node.name,), info)
    at_partial = lambda ia: partial[tuple(ia)]  # noqa: E731
    anchor, total = sum_of_partials(ctx, node, product, at_partial, shape, dtype, index)
    return ctx.anchored(anchor, lambda ia: total[tuple(ia)], dtype)


def sum_of_partials(ctx, node, product: Anchor, at_partial, shape, dtype: str, index=None):
    """Split-K's second half: the partial products (`product`, its first axis the slices; the
    value `at_partial` at its indices) written to memory in the accumulator's dtype, and the
    anchor of their sum over the slices, with that sum (`shape`, a compute the epilogue reads).
    `index` maps an output index into the partials' (after the slice), the same where None."""
    partials = ctx.materialize(ctx.anchored(product, at_partial, opmath_dtype(dtype)))
    splits = product.info["shape"][0]
    z = te.reduce_axis((0, splits), name="z")
    index = index or (lambda *idx: idx)
    total = te.compute(
        tuple(shape),
        lambda *idx: te.sum(partials.at((z.var, *index(*idx))), axis=z),
        name=ctx.unique(f"{node.name}_sum"),
    )
    info = {"shape": tuple(shape), "stages": [total]}
    return Anchor("reduce", total, frozenset(partials.reads), (node.name,), info), total
