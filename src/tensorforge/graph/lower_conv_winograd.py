"""3 x 3 stride-1 convolutions by Winograd's minimal filtering F(m x m, 3 x 3) on the CPU: the
weights transformed once at compile time (constants), the input's (m + 2) x (m + 2) tiles
transformed by a kernel, (m + 2)^2 independent matrix products [filters x channels] @ [channels
x tiles] (the graph's register-tiled matmul schedule), and the inverse transform, whose last
step (tiles back to rows) carries the convolution's epilogue (bias, the folded batch norm, a
residual add, ReLU) as any element-wise kernel does.

F(4 x 4, 3 x 3) makes 36 products where the direct convolution makes 144 multiply-adds per
4 x 4 output tile and channel pair (4x fewer); F(2 x 2, 3 x 3) 16 against 36 (2.25x fewer), and
is more accurate (its transforms' entries are 0 and +-1, 1/2). Lavin & Gray, "Fast Algorithms
for Convolutional Neural Networks" (2015) give the matrices below.

Seven kernels; the products' columns j = n * T + t run over the tiles of every image of the
batch (T = TH x TW a image, t = ty * TW + tx), r, s, a, b in 0..m + 1 and i, j in 0..m - 1:
  tiles[r, s, c, j] = input[n, c, m * ty + r - ph, m * tx + s - pw] (0 outside)  (a gather)
  V[a, b, c, j] = (B^T d B)[a, b] of each tile d: two products of m + 2 terms, along s then r
  M[ab, f, j] = sum_c U[ab, f, c] V[ab, c, j]   (U = G g G^T: constant weights, the BN folded)
  Z[i, j', f, j] = (A^T M A)[i, j']: two products of m + 2 terms
  out[n, f, y, x] = Z[y % m, x % m, f, n * T + (y // m) * TW + x // m]  (+ the epilogue)
Each product is a matmul anchor (its schedule's register tiles come from the Target: vector
width and registers), vectors along j; only the first and last kernels gather, once an element.
On 64 x 64 at 56 (1 thread, Zen 4) they take 0.15, 0.06 + 0.06, 0.57, 0.04 + 0.03, 0.05 ms.
"""

from __future__ import annotations

from fractions import Fraction

import torch

from tensorforge import te
from tensorforge.graph.values import Anchor, Lazy, in_dtype, read_buffer

# (B^T, G, A^T) of F(m x m, 3 x 3), exact; rows of B^T and A^T as Fractions
_F = Fraction
TRANSFORMS = {
    4: (
        [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ],
        [
            [_F(1, 4), 0, 0],
            [_F(-1, 6), _F(-1, 6), _F(-1, 6)],
            [_F(-1, 6), _F(1, 6), _F(-1, 6)],
            [_F(1, 24), _F(1, 12), _F(1, 6)],
            [_F(1, 24), _F(-1, 12), _F(1, 6)],
            [0, 0, 1],
        ],
        [
            [1, 1, 1, 1, 1, 0],
            [0, 1, -1, 2, -2, 0],
            [0, 1, 1, 4, 4, 0],
            [0, 1, -1, 8, -8, 1],
        ],
    ),
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [_F(1, 2), _F(1, 2), _F(1, 2)], [_F(1, 2), _F(-1, 2), _F(1, 2)], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
}


def winograd_weights(w: torch.Tensor, m: int) -> torch.Tensor:
    """U[ab, f, c] = (G g G^T)[a, b] of each filter g = w[f, c] (3 x 3), computed in float64
    and rounded once to w's dtype: the left matrices of the (m + 2)^2 products."""
    _, g, _ = TRANSFORMS[m]
    G = _matrix(g)
    F, C = w.shape[:2]
    u = torch.einsum("ak,fckl,bl->abfc", G, w.double(), G)
    return u.reshape((m + 2) ** 2, F, C).to(w.dtype).contiguous()


def _matrix(rows) -> torch.Tensor:
    return torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)


def _product(ctx, name: str, operands, shape, k: int, dtype: str, term) -> Lazy:
    """out[idx] = sum_r term(idx, r) over r < k, `term` reading the `operands` (Lazy values):
    a matmul anchor (the graph's register-tiled panels: row tiles along the second-last axis,
    vectors along the last), materialized."""
    r = te.reduce_axis((0, k), name="k")
    stage = te.compute(
        tuple(shape), lambda *idx: te.sum(term(idx, r.var), axis=r), name=ctx.unique(name)
    )
    reads = frozenset().union(*(operand.reads for operand in operands))
    info = {"shape": tuple(shape), "stages": [stage], "k": k}
    anchor = Anchor("matmul", stage, reads, (), info)
    return ctx.materialize(ctx.anchored(anchor, lambda ia: stage[tuple(ia)], dtype), node=name)


def _separable(ctx, name: str, rows, src: Lazy, size: int, dtype: str):
    """L X L^T for the alpha x alpha blocks X of src (alpha, alpha, size) (a block's entry
    (r, s) at [r, s, j], blocks along j) and L = `rows` (out x alpha): two products of alpha
    terms each, along s then along r, the result (out, out, size) (as (out, out * size) in
    memory). Dense, the Kronecker matrix L (x) L made alpha^2 terms (3x the work)."""
    out, alpha = len(rows), len(rows[0])
    left = ctx.add_constant(_matrix(rows).to(_torch_dtype(dtype)), f"{name}_rows")

    def along_s(idx, s):  # (r, b, j): sum_s L[b, s] X[r, s, j]
        r, b, j = idx
        return in_dtype(left.at((b, s)), dtype) * src.at((r, s, j))

    half = _product(ctx, f"{name}_s", (left, src), (alpha, out, size), alpha, dtype, along_s)

    def along_r(idx, r):  # (a, (b, j)): sum_r L[a, r] half[r, b, j]
        a, bj = idx
        return in_dtype(left.at((a, r)), dtype) * half.at((r, bj // size, bj % size))

    return _product(ctx, name, (left, half), (out, out * size), alpha, dtype, along_r)


def _torch_dtype(dtype: str) -> torch.dtype:
    return {"float32": torch.float32, "float64": torch.float64}[dtype]


def winograd_conv(ctx, node, x: Lazy, w: torch.Tensor, shape, padding, dtype: str, m: int) -> Lazy:
    """The convolution (3 x 3, stride 1, dilation 1, groups 1; constant weights `w`, the batch
    norm folded in) of output `shape` by F(m x m, 3 x 3): the value before the epilogue. The
    tiles of every image of the batch are the products' columns (j = n * T + t)."""
    bt, _, at = TRANSFORMS[m]
    alpha = m + 2
    N, C, H, W = x.shape
    F = w.shape[0]
    _, _, OH, OW = shape
    TH, TW = -(-OH // m), -(-OW // m)
    T = TH * TW
    J = N * T
    ph, pw = padding
    src = ctx.no_anchor(x)
    name = node.name

    def tile_at(idx):
        r, s, c, n, ty, tx = idx
        iy, ix = ty * m + r - ph, tx * m + s - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        v = src.at((n, c, te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    # tiles[r, s, c, n, ty, tx]: each tile's inputs, a channel's tiles contiguous (gathered
    # along tx: the innermost loop has the simplest index; flattened, each lane divided by TW)
    tiles = ctx.materialize(
        Lazy((alpha, alpha, C, N, TH, TW), dtype, tile_at, src.reads, (), 3 + src.cost),
        node=f"{name}_wtiles",
    )
    tiles = read_buffer(tiles.source, (alpha, alpha, C * J))
    V = _separable(ctx, f"{name}_wv", bt, tiles, C * J, dtype)  # (alpha, alpha * C * J)
    U = ctx.add_constant(winograd_weights(w, m), f"{name}_wino")

    def product(idx, c):  # (ab, f, j): sum_c U[ab, f, c] V[ab, c, j]
        ab, f, j = idx
        v = V.at((ab // alpha, (ab % alpha) * C * J + c * J + j))
        return in_dtype(U.at((ab, f, c)), dtype) * v

    M = _product(ctx, f"conv_{name}_wm", (U, V), (alpha * alpha, F, J), C, dtype, product)
    M_blocks = Lazy(
        (alpha, alpha, F * J),
        dtype,
        lambda idx: M.at((idx[0] * alpha + idx[1], idx[2] // J, idx[2] % J)),
        M.reads,
    )
    Z = _separable(ctx, f"{name}_wz", at, M_blocks, F * J, dtype)  # (m, m * F * J)

    def out_at(idx):
        n, f, y, xx = idx
        j = n * T + (y // m) * TW + xx // m
        return Z.at((y % m, (xx % m) * F * J + f * J + j))

    return Lazy(tuple(shape), dtype, out_at, Z.reads, (name,), 3)


# Winograd where its estimated work is this many times less than the direct convolution's
WORK_MARGIN = 1.3


def winograd_tile(ctx, w, shape, stride, dilation, groups, dtype: str) -> int:
    """m of F(m x m, 3 x 3) for this convolution, 0 for the direct paths: CPU, float32, constant
    3 x 3 weights, stride 1, dilation 1, groups 1, static sizes, and the estimated work
    (`winograd_work`) WORK_MARGIN times less than the direct convolution's.

    Measured (1 thread, Zen 4, eager / ours, direct -> Winograd, conv + bias + ReLU, same
    process): batch 1, channels @ size: 64 @ 56 1.0 -> 2.15, 128 @ 28 0.9 -> 2.0, 256 @ 14 1.0
    -> 2.3 (F(4)), 512 @ 7 1.4 -> 2.0 (F(2); F(4): 0.7, 4 tiles fill a quarter of a vector),
    64 -> 128 @ 28 0.95 -> 2.05, 24 -> 40 @ 30 1.46 -> 2.57, 16 @ 56 1.12 -> 1.43, 8 -> 32 @ 64
    0.99 -> 1.51; batch 8: 64 @ 56 0.78 -> 1.59, 256 @ 14 0.88 -> 1.87, 512 @ 7 0.86 -> 2.05
    (F(4), 32 tiles). Direct kept: 3 -> 16 @ 224 (1.08 against 1.15, even: few channels, the
    transforms cost as much as the products), 64 @ 9 (1.40 / 1.39 F(4), 0.84 F(2)), 256 @ 4
    (1.53 / 0.73 F(2)), 256 @ 2 (7.9 / 1.7), 1 x 1 images."""
    if ctx.target.kind != "llvm" or dtype != "float32" or w is None or groups != 1:
        return 0
    if tuple(w.shape[2:]) != (3, 3) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
        return 0
    if not all(isinstance(s, int) for s in shape) or not isinstance(w.shape[1], int):
        return 0
    N, F, OH, OW = shape
    C = int(w.shape[1])
    lanes = ctx.target.vector_lanes("float32")
    work, m = min((winograd_work(N, C, F, OH, OW, m, lanes), m) for m in (4, 2))
    direct = 9 * N * OH * OW * C * F
    return m if work * WORK_MARGIN <= direct else 0


def winograd_work(N: int, C: int, F: int, OH: int, OW: int, m: int, lanes: int) -> int:
    """Multiply-adds (and gathered copies) of F(m x m, 3 x 3) over the products' columns (the
    tiles of the batch) rounded up to whole vectors: per column the alpha^2 products (C x F),
    the input's separable transform (2 alpha^3 a channel) and gather (alpha^2), the output's
    (alpha^2 m + m^2 alpha a filter)."""
    alpha = m + 2
    tiles = N * -(-OH // m) * -(-OW // m)
    columns = -(-tiles // lanes) * lanes
    per_column = alpha**2 * C * F + (2 * alpha**3 + alpha**2) * C + (alpha**2 + m * alpha) * m * F
    return columns * per_column
