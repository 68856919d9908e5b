"""Products on tensor cores (CUDA, sm_80+): mm, addmm, bmm and linear layers of float16 or
bfloat16 whose reduction is whole 16-term steps, and of float32 in TF32 (8-term steps) where
torch's flags allow it (graph/options.py's Float32Precision: convolutions by default, matrix
products under set_float32_matmul_precision("high")), and convolutions as the product of their
weights and im2col columns (`tensor_core_conv`).

The product is declared the way the tensor-core intrinsics match it (ops/tensor_core.py):

    At[*b, i, k] = A[*b, min(i, n - 1), k]         rows padded to whole block tiles (a shared tile)
    C[*b, i, j]  = sum_k float32(At[i, k]) * float32(B[k, j])           (warp fragments, mma.sync)
    CS[*b, i, j] = C[*b, i, j]                      the block's float32 tile in shared memory

and the kernel's epilogue (bias, GELU, residual adds, the cast to half: any element-wise chain)
reads CS. Staging the accumulators in shared memory is what lets an arbitrary epilogue follow the
fragments, whose layout only the store intrinsic knows. Rows past n read row n - 1 (in bounds,
never stored); a constant right matrix is zero-padded to whole column tiles at compile time, and
one computed in the graph (attention's K^T, V) is read unpadded, so its columns must be whole
tiles. Few tiles over a long k split k into slices whose float32 partials a second kernel sums.

On sm_90 a product that fills every SM with blocks of 64 x 64 or more, over k steps of 64, and
whose operands are whole rows of buffers (16-byte aligned, so copies land in the 128-byte
swizzled layout) runs on `wgmma` instead (ops/wgmma.py): warpgroups of 64 rows each multiply
a k step from shared memory while the next is copied in. Measured on an H100 at 2048 x 3072 x
768, the ops library's GEMM with these tiles: 36 us against mma.sync's 47-49. A reduction of
12+ k steps over up to 3 waves of tiles (ViT-B's and GPT-2's qkv and MLP) takes the hand-written
warp-specialized kernel instead (graph/lower_ws_product.py), bias and GELU in its epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tensorforge import te
from tensorforge.codegen.cuda import STATIC_SHARED_LIMIT
from tensorforge.errors import ScheduleError
from tensorforge.graph.lower_conv_gemm import im2col, positions, sum_of_partials
from tensorforge.graph.lower_ws_product import ws_left_operand, ws_product
from tensorforge.graph.lowerer import TE_TO_TORCH
from tensorforge.graph.schedules_tensor_core import STAGING_PAD
from tensorforge.graph.split_k import splits_to_fill
from tensorforge.graph.values import Anchor, Lazy, is_static, numel
from tensorforge.ir.arith import simplify_expr
from tensorforge.ops.gemm_fp16 import TensorCoreTiles as PipelineTiles
from tensorforge.ops.matmul import round_up
from tensorforge.ops.tensor_core import OPERANDS
from tensorforge.ops.tensor_core import SUPPORTED as HALVES
from tensorforge.ops.wgmma_tf32 import K_STEP as TF32_K_STEP
from tensorforge.ops.wgmma_tf32 import round_to_tf32
from tensorforge.te.expr import Const, TensorRead, Var, structural_equal
from tensorforge.te.tensor import PlaceholderOp
from tensorforge.te.visit import walk

MAX_COLUMNS = 1 << 25  # a convolution's im2col columns (64 MiB of halves, 128 of floats;
# ResNet's stem at batch 16: 32M), past which it stays direct
MIN_ROWS = 16  # fewer rows: a matrix-vector product, bound by reading B (register tiles)
BLOCK_K_BYTES = 64  # of a row of A a k step stages: 32 halves or 16 floats (half that where
# k is an odd number of such steps)
TF32_MIN_MACS = 1 << 26  # a float32 convolution's multiply-adds from which it takes TF32
CONV_DEPTH = 16  # a convolution's reduction is zero-padded to whole steps of this many terms
STAGES = 3  # k steps in flight
# float32 convolutions in TF32 on wgmma (sm_90, tf32_wgmma_tiles): off, as measured slower than
# mma.sync (H100, fp32 ResNet-18: batch 16 1970 us of GPU time a call against 1781, batch 4 632
# against 597): its K-major columns cost more to write (layer 1: 53 us a layer against 48 at
# batch 16, 15 against 10 at batch 4) and the product streams them from memory as mma.sync does
# (layer 1 at batch 16: 92 us against 80). Reading the input itself (implicit GEMM) is next.
TF32_WGMMA_CONVS = False
TF32_COLUMN_RUN = 4  # taps of a position contiguous in TF32 wgmma's im2col columns: 16 bytes
# (one cp.async of the swizzled fill), positions side by side
SHARED_RESERVED = 1 << 10  # bytes of shared memory the GPU keeps a block (sm_80+)

# block tiles, largest first, with the warp tile of each of its 4 or 8 warps (8 where a block
# has an SM to itself: mma.sync's threads keep up to 255 registers, resident_blocks)
BLOCK_TILES = (
    (128, 256, 64, 64),
    (128, 128, 64, 32),
    (64, 128, 32, 32),
    (64, 64, 32, 32),
    (32, 64, 16, 32),
    (16, 64, 16, 16),
)
# wgmma's block tiles (sm_90), largest first: warpgroups of 64 rows by the block's columns, k
# steps of 64 copied WGMMA_STAGES ahead (H100, ops GEMM at 2048 x 3072 x 768: 128 x 128 36 us,
# 64 x 128 37, 128 x 64 37, 128 x 256 39: its float32 tile would leave room for 2 stages only)
# 192 columns (ahead of 128 where both fill the SMs), filled by bulk tensor copies (WIDE_TILES):
# H200, GPU time a call of the product alone, one run: 2048 x 3072 x 768 with GELU 25.1 us on
# 128 blocks of 256 x 192 (3 stages: WGMMA_PIPELINE_BYTES) against 28.9 on 384 of 128 x 128 (2
# an SM) and 25.2 for cuBLAS then GELU; 2048 x 2304 x 768 (GPT-2's qkv) 21.8 on 128 x 192
# against 22.7 (cuBLAS 13.4). 128 x 256 lost (34.0 at 2048 x 3072 x 768: 1.45 waves of one
# block an SM), and so did clusters sharing B's tile by multicast (49.2 on 128 x 128 pairs)
WGMMA_TILES = ((256, 192), (128, 192), (128, 128), (64, 128), (128, 64), (64, 64))
WIDE_TILES = 192  # columns of the tiles that bulk tensor copies fill whatever TMA_FILLS says
# (measured so; the operands that are plain buffers: plain_source)
WGMMA_PIPELINE_BYTES = 192 << 10  # of shared memory a wgmma pipeline's stages take at most
# (256 x 192 blocks: 3 stages of 56 KiB, as measured; 4 would leave 3 KiB of the SM's 227)
WGMMA_K = 64
FULL_EIGHTHS = 7  # of the SMs a wgmma product's blocks must cover (choose_wgmma_tiles)
SPLIT_TILE = (64, 64)  # wgmma's block tile where none covers the SMs: k is split
# wgmma's operand tiles that are plain buffers (graph inputs, constants, earlier kernels'
# results, read as they are: plain_source) filled by bulk tensor copies, one thread's (TMA:
# rows past the buffer come in as zeros), instead of every thread's 16-byte cp.async. Off, as
# measured slower but for GPT-2 (H100, GPU time a call, TMA against cp.async in one run): MLP
# 768-3072-768 of 2048 rows 61.9 us against 60.7, GPT-2 block of 8 x 256 tokens 153.5 against
# 155.8, fp16 ResNet-18 batch 16 915 against 863, batch 4 300 against 286, batch 1 190 against
# 173, MLP of 64 rows 10.9 against 10.4, of 256 rows 19.0 against 17.1 (the split products and
# the convolutions lose most; not profiled further)
TMA_FILLS = False
WGMMA_STAGES = 4  # 3 at least: a step's multiplies stay in flight while the next one starts
# (128 x 128 blocks at 2048 x 3072 x 768: 31.1 us with 4, 33.1 with 3)


@dataclass(frozen=True)
class TensorCoreTiles(PipelineTiles):
    """ops/gemm_fp16's tiles (a block of block_m x block_n, warps of warp_m x warp_n, k steps of
    block_k staged `stages` deep in padded shared rows), and besides them the block's float32
    tile in shared memory, from which the epilogue reads. `dtype`: the operands' (OPERANDS:
    their element size and the padding of their shared rows; float32 is TF32)."""

    dtype: str = "float16"
    blocks: int = 1  # resident a multiprocessor (resident_blocks), for ptxas's register budget

    def shared_bytes(self, elem_bytes: int | None = None) -> int:
        """The pipeline's tiles and the float32 tile; past the static limit (48 KiB, where
        the kernel's shared memory is dynamic) the float32 tile takes the pipeline's bytes once
        the k loop is done (codegen/cuda_shared.py): the larger of the two."""
        operand = OPERANDS[self.dtype]
        pad_a, pad_b = (0, 0) if self.mma == "wgmma" else (operand.pad_a, operand.pad_b)
        a = self.block_m * (self.block_k + pad_a)  # (wgmma's tiles are swizzled, not padded)
        b = self.block_k * (self.block_n + pad_b)
        pipeline = (a + b) * (elem_bytes or operand.bytes) * max(1, self.stages)
        staged = self.block_m * (self.block_n + STAGING_PAD) * 4
        apart = pipeline + staged
        return apart if apart <= STATIC_SHARED_LIMIT else max(pipeline, staged)

    def resident_blocks(self, shared_limit: int) -> int:
        """Blocks of this kernel an SM holds: as many as its shared memory allows (at most 2)
        for wgmma, whose fragments live in shared memory (128 registers a thread are enough);
        1 for mma.sync, which keeps up to 255 registers a thread (the next k step's fragments
        in flight beside the accumulators)."""
        if self.mma != "wgmma":
            return 1
        return max(
            1, min(2, (shared_limit + SHARED_RESERVED) // (self.shared_bytes() + SHARED_RESERVED))
        )


def choose_tiles(
    batch: int,
    n: int,
    m: int,
    k: int,
    sm_count: int,
    shared_limit: int = 227 << 10,
    whole_columns: bool = False,
    dtype: str = "float16",
) -> TensorCoreTiles:
    """The largest block tile that still gives every SM a block; else the smallest, which a
    long k then splits (`_product`). Tiles are no thinner than the rows need (16 or 32 rows
    for so few, else 64+: a thin tile's block runs the whole k one step after another, its
    right matrix panel read by every block row; H100, fp16 MLP 768-3072-768 of 64 rows: 28.6
    us of GPU time on 16 x 64 tiles against 12.6 on 64 x 64 split 4 ways, 256 rows 57.5
    against 20.6) nor taller than them (but the smallest). Tiles whose shared memory (2+
    stages) is past `shared_limit` are left out, and with `whole_columns` (a right matrix
    that cannot be padded: computed in the graph) tiles whose width does not divide m.
    float32 (TF32) operands stage k steps of half as many terms: the same bytes, the same
    tiles. Thin tiles take k steps twice as long (16 rows: 11.2 -> 8.9 us)."""
    rows = round_up(n, 16)
    thinnest = max(h for h in (16, 32, 64) if h <= rows)
    fits = []
    for tile in BLOCK_TILES:
        if not thinnest <= tile[0] <= rows or (whole_columns and m % tile[1]):
            continue
        step = BLOCK_K_BYTES * (2 if tile[0] <= 32 else 1) // OPERANDS[dtype].bytes
        while k % step and step > OPERANDS[dtype].k_step:  # (k is whole mma steps)
            step //= 2
        stages = max(1, min(STAGES, k // step))
        tiles = TensorCoreTiles(*tile[:2], step, *tile[2:], stages, dtype=dtype)
        while tiles.shared_bytes() > shared_limit and tiles.stages > min(2, stages):
            tiles = replace(tiles, stages=tiles.stages - 1)
        if tiles.shared_bytes() <= shared_limit:
            fits.append(tiles)
    if not fits and thinnest > 16:  # (none of the rows' height fits: thinner ones)
        return choose_tiles(batch, min(n, thinnest // 2), m, k, 0, shared_limit, whole_columns, dtype)  # fmt: skip
    if not fits:
        raise ScheduleError(
            f"no tensor-core tile of a {n} x {m} x {k} {dtype} product fits {shared_limit} bytes "
            f"of shared memory a block (the smallest, 16 x 64 in 2 stages, needs more)"
        )
    for tiles in fits:
        if batch * -(-n // tiles.block_m) * -(-m // tiles.block_n) >= sm_count:
            return tiles
    return fits[-1]


def choose_wgmma_tiles(
    batch: int, n: int, m: int, k: int, sm_count: int, shared_limit: int, whole_columns: bool,
    wide: bool = True,
) -> TensorCoreTiles | None:  # fmt: skip
    """The largest wgmma block tile that gives 7/8 of the SMs a block or more (a last wave
    short by a few SMs costs less than tiles of half the rows: H100, fp16 ResNet-18 at batch
    16, 916 -> 859 us of GPU time a call, its 512-filter convolutions on 128 blocks of 64 x 64
    rather than on mma.sync) and pads the product at most 1/8 more than the tile padding
    least; where none does, `split_wgmma_tiles`. None where k is not 3+ steps of WGMMA_K:
    such products take the mma.sync tiles and, over a long k, its split. `wide` False leaves
    out the WIDE_TILES (convolutions: not measured on them)."""
    if k % WGMMA_K or k < 3 * WGMMA_K:
        return None
    fits = []
    for block_m, block_n in WGMMA_TILES:
        if (whole_columns and m % block_n) or (not wide and block_n == WIDE_TILES):
            continue
        tiles = _wgmma_tiles(block_m, block_n, k // WGMMA_K, shared_limit)
        rows, cols = round_up(n, block_m), round_up(m, block_n)
        blocks = batch * rows * cols // (block_m * block_n)
        if tiles.shared_bytes() <= shared_limit and 8 * blocks >= FULL_EIGHTHS * sm_count:
            fits.append((rows * cols, tiles))
    if not fits:
        return split_wgmma_tiles(batch, n, m, k, sm_count, shared_limit, WGMMA_K, whole_columns)
    least = min(work for work, _ in fits)
    return next(tiles for work, tiles in fits if work * 8 <= least * 9)


def _wgmma_tiles(block_m: int, block_n: int, steps: int, shared_limit: int) -> TensorCoreTiles:
    """A wgmma block tile staging min(WGMMA_STAGES, steps) k steps, or 3 where that lets two
    blocks share an SM (H100, 2048 x 768 x 3072 on 64 x 128 blocks: 33.5 us against 37.3 with
    4 stages, one block an SM)."""
    stage_bytes = (block_m + block_n) * WGMMA_K * 2
    stages = max(3, min(WGMMA_STAGES, steps, WGMMA_PIPELINE_BYTES // stage_bytes))
    stages = min(stages, steps)
    fill = "tma" if block_n == WIDE_TILES else "cp_async"
    tiles = TensorCoreTiles(block_m, block_n, WGMMA_K, 16, block_n, stages, 1, "mbarrier_lag", mma="wgmma", fill=fill)  # fmt: skip
    three = replace(tiles, stages=min(3, stages))
    if tiles.shared_bytes() > shared_limit or (
        tiles.resident_blocks(shared_limit) < three.resident_blocks(shared_limit)
    ):
        tiles = three
    return replace(tiles, blocks=tiles.resident_blocks(shared_limit))


def split_wgmma_tiles(
    batch: int, n: int, m: int, k: int, sm_count: int, shared_limit: int, step: int,
    whole_columns: bool = False,
) -> TensorCoreTiles | None:  # fmt: skip
    """Where no wgmma tile fills the SMs: SPLIT_TILE blocks whose k `_product` splits until
    they do, while each slice is 3+ k steps of `step` terms, for products of 64 rows or more;
    else None (mma.sync's tiles and split). H100, GPU time a call against mma.sync's split:
    fp16 ResNet-18 at batch 4 337 -> 287 us, batch 1 198 -> 173; MLP 768-3072-768 of 256 rows
    20.8 -> 16.8; GPT-2 block of 128 tokens 46.6 -> 39.3."""
    block_m, block_n = SPLIT_TILE
    if n < block_m or (whole_columns and m % block_n):  # (fewer rows: mma.sync's thin tiles)
        return None
    blocks = batch * -(-n // block_m) * -(-m // block_n)
    part = k // max(1, splits_to_fill(blocks, k, sm_count, step))
    if part < 3 * step:
        return None
    tiles = _wgmma_tiles(block_m, block_n, part // step, shared_limit)
    return tiles if tiles.shared_bytes() <= shared_limit else None


def reads_whole_rows(at, rank: int) -> bool:
    """Whether `at` (an index function of `rank` dimensions) reads a buffer of the kernel at
    the same last index: 8 consecutive elements along the last dimension are 16 contiguous,
    aligned bytes (rows a multiple of 8 elements long), as the swizzled copies need."""
    idx = tuple(Var(f"i{d}", "int32") for d in range(rank))
    e = at(idx)
    if not (isinstance(e, TensorRead) and isinstance(e.tensor.op, PlaceholderOp)):
        return False
    *outer, last = (simplify_expr(i) for i in e.indices)  # (views leave `0 + i` behind)
    length = e.tensor.shape[-1]
    return (
        structural_equal(last, idx[-1])
        and not any(n is idx[-1] for o in outer for n in walk(o))
        and isinstance(length, Const)
        and length.value % 8 == 0
    )


def plain_source(at, shape, dtype: str):
    """The kernel argument (a placeholder) that index function `at` over `shape` reads as it
    is, each index its own (a slice of leading rows too), where its rows are whole 16-byte
    pieces: what bulk tensor copies can fill a tile from; else None."""
    idx = tuple(Var(f"i{d}", "int32") for d in range(len(shape)))
    e = at(idx)
    if not (isinstance(e, TensorRead) and isinstance(e.tensor.op, PlaceholderOp)):
        return None
    if e.tensor.dtype != dtype or len(e.indices) != len(idx):
        return None
    if not all(structural_equal(simplify_expr(i), v) for i, v in zip(e.indices, idx)):
        return None
    length = e.tensor.shape[-1]
    row_bytes = OPERANDS[dtype].bytes * length.value if isinstance(length, Const) else 1
    return e.tensor if row_bytes % 16 == 0 else None


def with_tma_fills(tiles: TensorCoreTiles) -> TensorCoreTiles:
    """wgmma `tiles` whose plain operands bulk tensor copies fill (fill "tma": the schedule
    takes them where an operand tile reads a buffer as it is); half operands only (tma_fill's)."""
    if tiles.mma != "wgmma" or tiles.dtype not in HALVES:
        return tiles
    return replace(tiles, fill="tma")


def _has_wgmma(target, dtype: str) -> bool:
    """wgmma of half operands (ops/wgmma.py's), which exists on sm_90 (sm_90a code) only:
    Blackwell has other instructions."""
    return target.kind == "cuda" and target.sm_version == 90 and dtype in HALVES


def _has_tensor_cores(target, dtype: str, tf32: bool) -> bool:
    """mma.sync on this dtype, CUDA sm_80+: a half dtype, or float32 where TF32 is allowed."""
    allowed = dtype in HALVES or (dtype == "float32" and tf32)
    return target.kind == "cuda" and allowed and target.sm_version >= 80


def wants_tensor_cores(target, dtype: str, shape, k, b_constant: bool, tf32: bool = False) -> bool:
    """Half products (and float32 ones, with `tf32`) on sm_80+ of static sizes, 16+ rows and
    whole mma k steps (16 terms; TF32's 8); a right matrix computed in the graph (bmm) needs
    whole 64-column tiles too (it is not padded)."""
    if not _has_tensor_cores(target, dtype, tf32) or not is_static((*shape, k)):
        return False
    n, m = shape[-2:]
    return n >= MIN_ROWS and k % OPERANDS[dtype].k_step == 0 and (b_constant or m % 64 == 0)


def can_pad_for_tensor_cores(target, dtype: str, shape) -> bool:
    """Whether a product of `shape` (static sizes, 16+ rows) could run on tensor cores with
    its operands padded (`padded_operands`), or whole."""
    return _has_tensor_cores(target, dtype, False) and is_static(shape) and shape[-2] >= MIN_ROWS


def padded_operands(ctx, a: Lazy, b: Lazy, shape, dtype: str) -> tuple[Lazy, Lazy] | None:
    """A half product whose right matrix is computed in the graph, with a sum that is not
    whole mma k steps or columns that are not whole 64-column tiles (a Swin window's 49 x 49
    x 32 attention), as operands a tensor-core product takes: copies zero-padded to whole
    steps and tiles (the padded sums add zeros; the padded columns are never stored), or None
    where it stays on CUDA cores (run-time sizes, too few rows). Without them such products
    ran on CUDA cores at 2 TFLOP/s (H200, Swin-T fp16 batch 8: 0.1 ms a stage-1 product)."""
    if not can_pad_for_tensor_cores(ctx.target, dtype, (*shape, *a.shape)):
        return None
    *_, n, m = shape
    k = int(a.shape[-1])
    k_padded, m_padded = round_up(k, OPERANDS[dtype].k_step), round_up(m, 64)
    if (k_padded, m_padded) == (k, m):
        return None

    def padded(value: Lazy, rows: int, cols: int) -> Lazy:
        *lead, r, c = value.shape
        if (r, c) == (rows, cols):
            return value

        def at(idx):  # (reads clamped in bounds: a select evaluates both sides)
            *head, i, j = idx
            inside = value.at((*head, te.min(i, r - 1), te.min(j, c - 1)))
            return te.if_then_else(te.all(i < r, j < c), inside, te.const(0, value.dtype))

        lazy = Lazy((*lead, rows, cols), value.dtype, at, value.reads, value.nodes, 2)
        return ctx.materialize(lazy)

    return padded(a, n, k_padded), padded(b, k_padded, m_padded)


def tensor_core_product(
    ctx, node, a: Lazy, b: Lazy, constant: torch.Tensor | None, shape, dtype, out_dtype=None
):
    """The anchor of a tensor-core product of `dtype` operands (see the module doc): a Lazy of
    the product's shape, in `out_dtype` (default `dtype`; float32: the sums unrounded)."""
    *lead, n, m = shape
    k = int(a.shape[-1])
    if _has_wgmma(ctx.target, dtype):  # a long reduction over a few waves of tiles: by hand
        ws_a = ws_left_operand(ctx, n, m, k, lead, a, constant, dtype)
        if ws_a is not None:
            return ws_product(ctx, node, ws_a, constant, shape, dtype)
    wgmma = _has_wgmma(ctx.target, dtype) and reads_whole_rows(a.at, a.ndim)
    wgmma = wgmma and (constant is not None or reads_whole_rows(b.at, b.ndim))
    # a computed right matrix's tiles divide its columns (padded ones: padded_operands)
    columns = m if constant is not None else int(b.shape[-1])
    tiles = _tiles_for(ctx.target, lead, n, columns, k, dtype, constant is None, wgmma)
    rows, cols = round_up(n, tiles.block_m), round_up(m, tiles.block_n)
    tma = tiles.mma == "wgmma" and (TMA_FILLS or tiles.fill == "tma")
    source = plain_source(a.at, a.shape, dtype) if tma else None
    if tma and (
        source is not None or constant is not None or plain_source(b.at, b.shape, dtype) is not None
    ):
        tiles = with_tma_fills(tiles)
    if source is not None and tiles.fill == "tma":  # bulk tensor copies: rows past n come in
        # as zeros (or as the next batch's rows, never stored)
        a_tile = te.compute((*lead, rows, k), lambda *idx: source[idx], name=ctx.unique(f"{node.name}_a_tile"))  # fmt: skip
    else:
        a_tile = te.compute(
            (*lead, rows, k),
            lambda *idx: a.at((*idx[:-2], te.min(idx[-2], n - 1), idx[-1])),
            name=ctx.unique(f"{node.name}_a_tile"),
        )
    if constant is not None:
        padded = torch.zeros(k, cols, dtype=constant.dtype)
        padded[:, :m] = constant
        weights = ctx.add_constant(padded, f"{node.name}_b_padded")
        b_tile, reads = weights.source.placeholder, a.reads | weights.reads
    else:  # m is whole column tiles (wants_tensor_cores)
        b_tile = te.compute(
            (*lead, k, cols), lambda *idx: b.at(idx), name=ctx.unique(f"{node.name}_b_tile")
        )
        reads = a.reads | b.reads
    anchor, value = _product(ctx, node, shape, tiles, a_tile, b_tile, reads)
    return ctx.anchored(anchor, value, out_dtype or dtype)


def wants_tensor_core_conv(
    target, dtype: str, shape, groups: int, terms, constant: bool, tf32: bool = False
) -> bool:
    """Half convolutions (and float32 ones, with `tf32`) with constant weights and one group on
    sm_80+, of static sizes, whose im2col columns (`terms` = C x KH x KW rows of them) hold at
    most MAX_COLUMNS elements."""
    wanted = _has_tensor_cores(target, dtype, tf32) and groups == 1 and constant
    if not wanted or not is_static(shape):
        return False
    N, _, OH, OW = shape
    return N * round_up(terms, CONV_DEPTH) * OH * OW <= MAX_COLUMNS


def tensor_core_conv(ctx, node, x: Lazy, w: torch.Tensor, shape, stride, padding, dilation, dtype):
    """out[n, f, p] = sum_r W[f, r] col[n, r, p] on tensor cores: the filters are the rows (the
    constant weights, zero-padded to whole row tiles and 16-term steps), the output positions
    the columns (im2col, zero-padded to whole column tiles). A Lazy of the convolution's shape."""
    N, F, OH, OW = shape
    K, P = w[0].numel(), OH * OW
    # wgmma reads the materialized columns; a plain 1 x 1 convolution over whole tiles reads the
    # input itself (im2col), whose rows (image rows) are not the columns' (mma.sync reads them)
    pointwise = w.shape[2:] == (1, 1) and tuple(stride) == (1, 1) and not any(padding)
    tiles = None if pointwise else tf32_wgmma_tiles(ctx.target, N, F, P, K, dtype)
    k_major = tiles is not None  # TF32 wgmma: columns K-major, (N, positions, taps)
    depth = round_up(K, TF32_K_STEP if k_major else CONV_DEPTH)
    if tiles is None:
        wgmma = _has_wgmma(ctx.target, dtype) and not pointwise
        tiles = _tiles_for(ctx.target, [N], F, P, depth, dtype, wgmma=wgmma, wide=False)
        if tiles.mma == "wgmma" and TMA_FILLS:  # (the padded weights, the materialized columns)
            tiles = with_tma_fills(tiles)
    rows, cols = round_up(F, tiles.block_m), round_up(P, tiles.block_n)
    col, col_at = im2col(
        ctx, node, x, w.shape, shape, stride, padding, dilation, cols, depth,
        TF32_COLUMN_RUN if k_major else 0,
    )  # fmt: skip
    if k_major:
        b_tile = te.compute(
            (N, cols, depth), lambda n, p, r: col_at(n, r, p), name=ctx.unique(f"{node.name}_col_tile")
        )  # fmt: skip
    else:
        b_tile = te.compute((N, depth, cols), col_at, name=ctx.unique(f"{node.name}_col_tile"))
    padded = torch.zeros(rows, depth, dtype=TE_TO_TORCH[dtype])  # (folded BN: float32 weights)
    padded[:F, :K] = w.reshape(F, K)
    if k_major:  # wgmma drops a float's low bits: rounded here as mma.sync's cvt.rna does
        padded = round_to_tf32(padded)
    weights = ctx.add_constant(padded, f"{node.name}_w_padded")
    a_tile = te.compute(
        (rows, depth), lambda f, r: weights.at((f, r)), name=ctx.unique(f"{node.name}_w_tile")
    )
    reads = col.reads | weights.reads
    anchor, value = _product(ctx, node, (N, F, P), tiles, a_tile, b_tile, reads, k_major)
    return ctx.anchored(anchor, value, dtype, shape=shape, to_logical=positions(OW))


def tf32_wgmma_tiles(target, N: int, F: int, P: int, K: int, dtype: str):
    """wgmma tiles (sm_90) for a float32 convolution in TF32 of F filters x P positions over
    K taps (padded to whole 32-float k steps), or None: choose_wgmma_tiles' for the halves of
    the same bytes (a k step of 32 floats is one of 64 halves: one 128-byte swizzled row);
    where no tile fills the SMs, 64 x 64 tiles whose k `_product` splits until they do, while
    each slice is 3+ k steps (ResNet-18's later layers at batch 4)."""
    wgmma = TF32_WGMMA_CONVS and target.kind == "cuda" and target.sm_version == 90
    if not (wgmma and dtype == "float32"):
        return None
    limit = target.max_shared_memory_opt_in
    depth = round_up(K, TF32_K_STEP)
    halves = choose_wgmma_tiles(N, F, P, 2 * depth, target.sm_count, limit, False)
    if halves is None:
        return None
    tiles = replace(halves, block_k=TF32_K_STEP, dtype="float32")
    return replace(tiles, blocks=tiles.resident_blocks(limit))  # (the split's own tiles too)


def _tiles_for(
    target, lead, n: int, m: int, k: int, dtype: str, whole_columns=False, wgmma=False, wide=True
):
    batch = numel(lead)
    limit = target.max_shared_memory_opt_in
    if wgmma:
        tiles = choose_wgmma_tiles(batch, n, m, k, target.sm_count, limit, whole_columns, wide)
        if tiles is not None:
            return tiles
    return choose_tiles(batch, n, m, k, target.sm_count, limit, whole_columns, dtype)


def _product(ctx, node, shape, tiles, a_tile, b_tile, reads, b_k_major: bool = False):
    """C[*b, i, j] = sum_k float32(a_tile[(*b,) i, k]) * float32(b_tile[(*b,) k, j]) over whole
    tiles (either side may be one matrix for the whole batch: the weights; `b_k_major`: b_tile
    is [(*b,) j, k], TF32 wgmma's right operand): its anchor, and the
    float32 value at an index of `shape`. Where the tiles are too few to fill the SMs and k is
    long, k is split into slices (each its blocks), partial products a kernel of their own, and
    the anchor is their sum (the epilogue's kernel)."""
    *lead, n, m = shape
    rows, k = (int(e.value) for e in a_tile.shape[-2:])
    cols = int(b_tile.shape[-2 if b_k_major else -1].value)
    blocks = numel(lead) * (rows // tiles.block_m) * (cols // tiles.block_n)
    splits = max(1, splits_to_fill(blocks, k, ctx.target.sm_count, tiles.block_k))
    if tiles.mma == "wgmma" and 8 * blocks >= FULL_EIGHTHS * ctx.target.sm_count:
        splits = 1  # (7/8 of the SMs is full enough: choose_wgmma_tiles; else its split)
    part = k // splits
    a_batched, b_batched = len(a_tile.shape) > 2, len(b_tile.shape) > 2
    r = te.reduce_axis((0, part), name="k")

    def product(*idx):
        z, *bi, i, j = idx if splits > 1 else (0, *idx)
        kk = z * part + r.var if splits > 1 else r.var
        a_at = a_tile[(*bi, i, kk) if a_batched else (i, kk)]
        b_at = (
            b_tile[(*bi, *((j, kk) if b_k_major else (kk, j)))]
            if b_batched
            else (b_tile[(j, kk) if b_k_major else (kk, j)])
        )
        return te.sum(a_at.astype("float32") * b_at.astype("float32"), axis=r)

    slices = (splits,) if splits > 1 else ()
    C = te.compute((*slices, *lead, rows, cols), product, name=ctx.unique(f"mm_{node.name}"))
    staged = te.compute(C.shape, lambda *idx: C[idx], name=ctx.unique(f"mm_{node.name}_tile"))
    stages = [C, staged, a_tile] + ([b_tile] if isinstance(b_tile.op, te.ComputeOp) else [])
    info = {"shape": (*slices, *shape), "stages": stages, "k": part, "tensor_core": tiles}
    anchor = Anchor("matmul", C, frozenset(reads), (node.name,), info)
    if splits == 1:
        return anchor, lambda ia: staged[tuple(ia)]
    summed, total = sum_of_partials(
        ctx, node, anchor, lambda ia: staged[tuple(ia)], shape, "float32"
    )
    return summed, lambda ia: total[tuple(ia)]
