"""The CUDA schedule of a tensor-core product (graph/lower_tensor_core.py) and its epilogue.

A block computes one block_m x block_n tile of the kernel's output:
- its 4 or 8 warps each accumulate a warp_m x warp_n fragment with `mma.sync` (ops/tensor_core.py's
  intrinsics, through `tensorize`; float32 tiles in TF32), the A and B tiles of each k step
  filled by 16-byte `cp.async` copies (8 halves or 4 floats) `stages` steps ahead (double_buffer
  with mbarriers), rows padded as the operand's fragment loads want them (OPERANDS: distinct
  banks);
- the warps store their fragments into the block's float32 tile in shared memory;
- all its threads then compute the epilogue from it, EPILOGUE_VECTOR consecutive columns a
  thread (coalesced stores; rows and columns past the output's are not stored).

With wgmma tiles (sm_90) the warps are warpgroups' quarters, 16 rows by the block's columns
each; the tiles are copied 16 bytes at a time into the 128-byte swizzled layout wgmma reads,
and a k step's multiplies are still running when the next step starts (the pipeline releases
a tile one step late, and the store into the float32 tile first waits for them).
"""

from __future__ import annotations

from tensorforge import te
from tensorforge.ops.gemm_fp16 import WARP
from tensorforge.ops.tensor_core import OPERANDS, mma_store, mma_sync
from tensorforge.ops.wgmma import swizzled_fill, tma_fill, wgmma_sync
from tensorforge.ops.wgmma_tf32 import wgmma_tf32_sync
from tensorforge.te.expr import TensorRead, structural_equal
from tensorforge.te.tensor import PlaceholderOp

# floats added to each row of the float32 tile: a half-warp's 8-byte fragment stores (4 rows x
# 4 column pairs) then hit 32 distinct banks, where rows of a power-of-two length hit 8 only
STAGING_PAD = 8
EPILOGUE_VECTOR = 4  # columns a thread computes at once: one 16-byte read of the float32 tile
SOURCE = "cuda tensor cores: mma.sync fragments, epilogue from a shared tile"
WGMMA_SOURCE = "cuda tensor cores: wgmma on swizzled tiles, epilogue from a shared tile"


def schedule_tensor_core(s, out, anchor) -> str:
    """Schedule the product `anchor` (info["tensor_core"]: its tiles) under output stage `out`."""
    tiles = anchor.info["tensor_core"]
    wgmma = tiles.mma == "wgmma"
    C, staged, a_tile, *b_tile = anchor.info["stages"]
    dtype = a_tile.dtype
    operand = OPERANDS[dtype]
    tx = te.thread_axis((0, WARP), "threadIdx.x")
    ty = te.thread_axis((0, tiles.warps), "threadIdx.y")

    *lead, i, j = s[out].op.axis
    bi, bj, ii, jj = s[out].tile(i, j, tiles.block_m, tiles.block_n)
    if lead:  # the batch, and the slices of a split k
        s[out].bind(s[out].fuse(*lead) if len(lead) > 1 else lead[0], te.thread_axis("blockIdx.z"))
    s[out].bind(bi, te.thread_axis("blockIdx.y"))
    s[out].bind(bj, te.thread_axis("blockIdx.x"))
    # ptxas budgets registers for the blocks an SM holds (TensorCoreTiles.resident_blocks)
    s[out].pragma(bj, "launch_min_blocks", tiles.blocks)
    rest, vec = s[out].split(s[out].fuse(ii, jj), factor=EPILOGUE_VECTOR)
    rest, lane = s[out].split(rest, factor=WARP)
    _, warp_rows = s[out].split(rest, factor=tiles.warps)
    s[out].bind(lane, tx)
    s[out].bind(warp_rows, ty)
    s[out].vectorize(vec)

    s[staged].set_scope("shared")
    s[staged].storage_align(s[staged].op.axis[-2], tiles.block_n, STAGING_PAD)
    s[staged].compute_at(s[out], bj)
    *_, si, sj = s[staged].op.axis
    wi, si = s[staged].split(si, factor=tiles.warp_m)
    wj, sj = s[staged].split(sj, factor=tiles.warp_n)
    s[staged].reorder(wi, wj, si, sj)
    warp = s[staged].fuse(wi, wj)
    s[staged].bind(warp, ty)
    store = mma_store(tiles.warp_m, tiles.warp_n, "float32", "none", drain=wgmma)
    s[staged].tensorize(si, store)

    s[C].set_scope("warp")
    s[C].compute_at(s[staged], warp)
    *_, ci, cj = s[C].op.axis
    (kr,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kr, factor=tiles.block_k)
    s[C].reorder(ko, ci, cj, ki)
    tf32_wgmma = wgmma and dtype == "float32"  # (K-major B: [n][k] tiles, ops/wgmma_tf32.py)
    # tiles that read a buffer as it is (a constant right matrix's always): one thread's bulk
    # tensor copies where the tiles say so (lower_tensor_core's with_tma_fills), else cp.async
    tma = tiles.fill == "tma" and wgmma and not tf32_wgmma
    bulk = [tma and copies_a_buffer(a_tile.op), tma and (not b_tile or copies_a_buffer(b_tile[0].op))]  # fmt: skip
    if tf32_wgmma:
        mma = wgmma_tf32_sync(tiles.warp_m, tiles.warp_n, tiles.block_k, pending=1)
    elif wgmma:  # (pending 1: a step's multiplies run on while the next step's start; tiles
        # that the copy engine filled alone need no proxy fence)
        mma = wgmma_sync(tiles.warp_m, tiles.warp_n, tiles.block_k, dtype, 1, not all(bulk))
    else:
        mma = mma_sync(tiles.warp_m, tiles.warp_n, tiles.block_k, dtype)
    s[C].tensorize(ci, mma)

    s[a_tile].set_scope("shared")
    if b_tile:
        (b_shared,) = b_tile
        s[b_shared].set_scope("shared")
    else:  # a constant right matrix: its tile copied in
        b_input = next(t for t in s[C].op.input_tensors if t is not a_tile)
        b_shared = s.cache_read(b_input, "shared", [C])
    fills = (
        (a_tile, tiles.block_m, tiles.block_k, operand.pad_a),
        (b_shared, tiles.block_k, tiles.block_n, operand.pad_b),
    )
    if tf32_wgmma:
        fills = (fills[0], (b_shared, tiles.block_n, tiles.block_k, 0))
    for (stage, rows, row_len, pad), by_copy_engine in zip(fills, bulk):
        s[stage].compute_at(s[C], ko)
        *outer, row, col = s[stage].op.axis
        if by_copy_engine:  # the whole tile (a batch's part of it) by one thread
            s[stage].tensorize(row, tma_fill(rows, row_len, dtype))
            s[stage].double_buffer(tiles.stages, tiles.sync)
            continue
        lanes = 16 // operand.bytes  # 16 bytes a copy
        if wgmma:  # pieces of rows, each placed by the swizzle
            col, vec = s[stage].split(col, factor=lanes)
            rest = s[stage].fuse(*outer, row, col)
        else:
            s[stage].storage_align(row, row_len, pad)  # row stride row_len + pad
            rest, vec = s[stage].split(s[stage].fuse(*outer, row, col), factor=lanes)
        rest, lane = s[stage].split(rest, factor=WARP)
        _, warp_rows = s[stage].split(rest, factor=tiles.warps)
        s[stage].bind(lane, tx)
        s[stage].bind(warp_rows, ty)
        if wgmma:  # (float32 tiles too: TF32 wgmma's)
            s[stage].tensorize(vec, swizzled_fill(rows, row_len, dtype))
        else:
            s[stage].vectorize(vec)
        if tiles.stages > 1:  # cp.async fills `stages - 1` k steps ahead of the mma
            s[stage].double_buffer(tiles.stages, tiles.sync)
    return WGMMA_SOURCE if wgmma else SOURCE


def copies_a_buffer(op) -> bool:
    """Whether compute `op` reads a kernel argument (a placeholder) as it is: element idx of
    the tile is element idx of the buffer, as bulk tensor copies fill it."""
    body = op.body[0]
    if not (isinstance(body, TensorRead) and isinstance(body.tensor.op, PlaceholderOp)):
        return False
    axes = [iv.var for iv in op.axis]
    return len(body.indices) == len(axes) and all(
        structural_equal(i, v) for i, v in zip(body.indices, axes)
    )
