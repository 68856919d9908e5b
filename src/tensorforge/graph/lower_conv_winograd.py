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

Kernels, tiles t = ty * TW + tx (TH x TW of them), tile positions r, s in 0..m + 1:
  tiles[n, c, r * (m + 2) + s, t] = input[n, c, m * ty + r - ph, m * tx + s - pw] (0 outside)
  V[n, ab, c, t] = (B^T d B)[a, b] over the tile d (a sum with constant coefficients)
  M[n, ab, f, t] = sum_c U[ab, f, c] V[n, ab, c, t]   (U = G g G^T: the constant weights)
  Z[n, f, i * m + j, t] = (A^T M A)[i, j]
  out[n, f, y, x] = Z[n, f, (y % m) * m + x % m, (y // m) * TW + x // m]  (+ the epilogue)
Every kernel but the first and last reads and writes along the tiles (contiguous vectors);
those two gather once per element.
"""

from __future__ import annotations

from fractions import Fraction

import torch

from tensorforge import te
from tensorforge.graph.values import Anchor, Lazy, in_dtype

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
    G = torch.tensor([[float(v) for v in row] for row in g], dtype=torch.float64)
    F, C = w.shape[:2]
    u = torch.einsum("ak,fckl,bl->abfc", G, w.double(), G)
    return u.reshape((m + 2) ** 2, F, C).to(w.dtype).contiguous()


def _kronecker(rows, m: int) -> torch.Tensor:
    """L (x) L for a transform's rows L (float64): [(a, b), (r, s)] = L[a, r] L[b, s], the 2-d
    transform X -> L X L^T of a tile flattened row by row as one matrix product."""
    matrix = torch.tensor([[float(v) for v in row] for row in rows], dtype=torch.float64)
    return torch.kron(matrix, matrix)


def _product(ctx, name: str, left: Lazy, right, shape, k: int, dtype: str) -> Lazy:
    """out[n, i, j] = sum_k left[.., i, k] right(n, .., k, j): a matmul anchor (the graph's
    register-tiled panels, vectors along j), materialized. `left` has the shape's middle batch
    axes (if any) before (i, k); `right(idx, k)` reads the right operand at output idx."""
    r = te.reduce_axis((0, k), name="k")

    def body(*idx):
        *batch, i, _ = idx
        a = left.at((*batch[1:], i, r.var))
        return te.sum(in_dtype(a, dtype) * right(idx, r.var), axis=r)

    stage = te.compute(tuple(shape), body, name=ctx.unique(name))
    info = {"shape": tuple(shape), "stages": [stage], "k": k}
    anchor = Anchor("matmul", stage, frozenset(left.reads | right.reads), (), info)
    return ctx.materialize(ctx.anchored(anchor, lambda ia: stage[tuple(ia)], dtype), node=name)


class _Reader:
    """A right operand: `at(idx, k)` reading buffers `reads`."""

    def __init__(self, reads, at):
        self.reads, self.at = reads, at

    def __call__(self, idx, k):
        return self.at(idx, k)


def winograd_conv(ctx, node, x: Lazy, w: torch.Tensor, shape, padding, dtype: str, m: int) -> Lazy:
    """The convolution (3 x 3, stride 1, dilation 1, groups 1; constant weights `w`, the batch
    norm folded in) of output `shape` by F(m x m, 3 x 3): the value before the epilogue."""
    bt, _, at = TRANSFORMS[m]
    alpha = m + 2
    taps = alpha * alpha
    N, C, H, W = x.shape
    F = w.shape[0]
    _, _, OH, OW = shape
    TH, TW = -(-OH // m), -(-OW // m)
    T = TH * TW
    ph, pw = padding
    src = ctx.no_anchor(x)

    def tile_at(idx):
        n, rs, c, t = idx
        iy = t // TW * m + rs // alpha - ph
        ix = t % TW * m + rs % alpha - pw
        inside = te.all(iy >= 0, iy < H, ix >= 0, ix < W)
        v = src.at((n, c, te.max(te.min(iy, H - 1), 0), te.max(te.min(ix, W - 1), 0)))
        return te.if_then_else(inside, v, te.const(0, v.dtype))

    # tiles[n, rs, c * T + t]: each tile's (m + 2)^2 inputs, the tiles contiguous
    tiles = ctx.materialize(
        Lazy((N, taps, C, T), dtype, tile_at, src.reads, (), 3 + src.cost),
        node=f"{node.name}_wtiles",
    )
    name = node.name
    to_input = ctx.add_constant(_kronecker(bt, m).to(w.dtype), f"{name}_wbt")
    V = _product(
        ctx, f"{name}_wv", to_input,
        _Reader(tiles.reads, lambda idx, k: tiles.at((idx[0], k, idx[2] // T, idx[2] % T))),
        (N, taps, C * T), taps, dtype,
    )  # fmt: skip
    U = ctx.add_constant(winograd_weights(w, m), f"{name}_wino")
    M = _product(
        ctx, f"conv_{name}_wm", U,
        _Reader(V.reads, lambda idx, k: V.at((idx[0], idx[1], k * T + idx[3]))),
        (N, taps, F, T), C, dtype,
    )  # fmt: skip
    to_output = ctx.add_constant(_kronecker(at, m).to(w.dtype), f"{name}_wat")
    Z = _product(
        ctx, f"{name}_wz", to_output,
        _Reader(M.reads, lambda idx, k: M.at((idx[0], k, idx[2] // T, idx[2] % T))),
        (N, m * m, F * T), taps, dtype,
    )  # fmt: skip

    def out_at(idx):
        n, f, y, xx = idx
        return Z.at((n, (y % m) * m + xx % m, f * T + (y // m) * TW + xx // m))

    return Lazy(tuple(shape), dtype, out_at, Z.reads, (node.name,), 3)


def winograd_tile(ctx, w, shape, stride, dilation, groups, dtype: str) -> int:
    """m of F(m x m, 3 x 3) for this convolution, 0 for the direct paths: CPU, float32, constant
    3 x 3 weights, stride 1, dilation 1, groups 1, static sizes."""
    if ctx.target.kind != "llvm" or dtype != "float32" or w is None or groups != 1:
        return 0
    if tuple(w.shape[2:]) != (3, 3) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
        return 0
    if not all(isinstance(s, int) for s in shape) or not isinstance(w.shape[1], int):
        return 0
    return 4
