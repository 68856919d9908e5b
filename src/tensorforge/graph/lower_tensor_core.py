"""Half-precision products on tensor cores (CUDA, sm_80+): mm, addmm, bmm and linear layers of
float16 or bfloat16 whose reduction is whole 16-term steps.

The product is declared the way the tensor-core intrinsics match it (ops/tensor_core.py):

    At[*b, i, k] = A[*b, min(i, n - 1), k]         rows padded to whole block tiles (a shared tile)
    C[*b, i, j]  = sum_k float32(At[i, k]) * float32(B[k, j])           (warp fragments, mma.sync)
    CS[*b, i, j] = C[*b, i, j]                      the block's float32 tile in shared memory

and the kernel's epilogue (bias, GELU, residual adds, the cast to half: any element-wise chain)
reads CS. Staging the accumulators in shared memory is what lets an arbitrary epilogue follow the
fragments, whose layout only the store intrinsic knows. Rows past n read row n - 1 (in bounds,
never stored); a constant right matrix is zero-padded to whole column tiles at compile time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tensorforge import te
from tensorforge.graph.values import Anchor, Lazy
from tensorforge.ops.matmul import round_up

DTYPES = ("float16", "bfloat16")
MIN_ROWS = 16  # fewer rows: a matrix-vector product, bound by reading B (register tiles)
BLOCK_K = 32  # terms of a k step (16 where k is odd 16-term steps)
STAGES = 3  # k steps in flight

# block tiles, largest first, with the warp tile of each of its 4 or 8 warps (8 where a block
# has an SM to itself: the shared tiles of a 128 x 128 block leave room for no second one)
BLOCK_TILES = (
    (128, 256, 64, 64),
    (128, 128, 64, 32),
    (64, 128, 32, 32),
    (64, 64, 32, 32),
    (32, 64, 16, 32),
    (16, 64, 16, 16),
)


@dataclass(frozen=True)
class TensorCoreTiles:
    """A block computes block_m x block_n of the product with warps of warp_m x warp_n, over
    k steps of block_k staged `stages` deep in shared memory."""

    block_m: int
    block_n: int
    block_k: int
    warp_m: int
    warp_n: int
    stages: int

    @property
    def warps(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n)

    def shared_bytes(self) -> int:
        """The A and B tiles of each stage (rows padded by 8 halves) and the float32 tile."""
        a = self.block_m * (self.block_k + 8)
        b = self.block_k * (self.block_n + 8)
        return (a + b) * 2 * self.stages + self.block_m * self.block_n * 4


def choose_tiles(
    batch: int, n: int, m: int, k: int, sm_count: int, shared_limit: int = 227 << 10
) -> TensorCoreTiles:
    """The largest block tile that still gives every SM a block; else the smallest one that
    does not pad the rows past twice their number. Tiles whose shared memory (2+ stages) is
    past `shared_limit` are left out."""
    block_k = next(b for b in (BLOCK_K, 32, 16) if k % b == 0)
    stages = max(1, min(STAGES, k // block_k))
    rows = round_up(n, 16)
    fits = []
    for tile in BLOCK_TILES:
        tiles = TensorCoreTiles(*tile[:2], block_k, *tile[2:], stages)
        while tiles.shared_bytes() > shared_limit and tiles.stages > min(2, stages):
            tiles = replace(tiles, stages=tiles.stages - 1)
        if tiles.shared_bytes() <= shared_limit and (tile[0] <= rows or tile is BLOCK_TILES[-1]):
            fits.append(tiles)
    for tiles in fits:
        if batch * -(-n // tiles.block_m) * -(-m // tiles.block_n) >= sm_count:
            return tiles
    return fits[-1]


def _arch_number(target) -> int:
    arch = target.arch or ""
    digits = "".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit())
    return int(digits) if digits else 0


def wants_tensor_cores(target, dtype: str, shape, k, b_constant: bool) -> bool:
    """Half products on sm_80+ of static sizes, 16+ rows and whole 16-term k steps; a right
    matrix computed in the graph (bmm) needs whole 64-column tiles too (it is not padded)."""
    if target.kind != "cuda" or dtype not in DTYPES or _arch_number(target) < 80:
        return False
    if not all(isinstance(e, int) for e in (*shape, k)):
        return False
    n, m = shape[-2:]
    return n >= MIN_ROWS and k % 16 == 0 and (b_constant or m % 64 == 0)


def tensor_core_product(ctx, node, a: Lazy, b: Lazy, constant: torch.Tensor | None, shape, dtype):
    """The anchor of a tensor-core product (see the module doc): a Lazy of the product's shape."""
    *lead, n, m = shape
    k = int(a.shape[-1])
    batch = 1
    for e in lead:
        batch *= e
    target = ctx.target
    tiles = choose_tiles(batch, n, m, k, target.sm_count, target.max_shared_memory_opt_in)
    rows, cols = round_up(n, tiles.block_m), round_up(m, tiles.block_n)
    stem = node.name
    a_tile = te.compute(
        (*lead, rows, k),
        lambda *idx: a.at((*idx[:-2], te.min(idx[-2], n - 1), idx[-1])),
        name=ctx.unique(f"{stem}_a_tile"),
    )
    stages = []
    if constant is not None:
        padded = torch.zeros(k, cols, dtype=constant.dtype)
        padded[:, :m] = constant
        weights = ctx.add_constant(padded, f"{stem}_b_padded")
        b_tensor = weights.source.placeholder
        reads = a.reads | weights.reads
    else:  # m is whole column tiles (wants_tensor_cores)
        b_tensor = te.compute(
            (*lead, k, cols), lambda *idx: b.at(idx), name=ctx.unique(f"{stem}_b_tile")
        )
        stages.append(b_tensor)
        reads = a.reads | b.reads
    r = te.reduce_axis((0, k), name="k")

    def product(*idx):
        *bi, i, j = idx
        b_at = b_tensor[(r.var, j)] if constant is not None else b_tensor[(*bi, r.var, j)]
        return te.sum(a_tile[(*bi, i, r.var)].astype("float32") * b_at.astype("float32"), axis=r)

    C = te.compute((*lead, rows, cols), product, name=ctx.unique(f"mm_{stem}"))
    staged = te.compute(C.shape, lambda *idx: C[idx], name=ctx.unique(f"mm_{stem}_tile"))
    info = {
        "shape": tuple(shape),
        "stages": [C, staged, a_tile, *stages],
        "k": k,
        "tensor_core": tiles,
    }
    anchor = Anchor("matmul", C, frozenset(reads), (node.name,), info)
    return ctx.anchored(anchor, lambda ia: staged[tuple(ia)].astype(dtype), dtype)
