"""Half-precision GEMM on tensor cores: D = epilogue(A @ B) with float16 / bfloat16 inputs,
float32 accumulation and an optional fused bias / bias + GELU, batched or not.

The computation is declared once (`gemm_fp16`); the schedule stages A and B through padded
shared-memory tiles (conflict-free `ldmatrix` rows, an N-stage `cp.async` pipeline through
`double_buffer(stages, sync="mbarrier")`: per-slot mbarriers, no block barrier a k step; with
`cluster=2` pairs of blocks share B's tile by multicast bulk copies), orders the blocks in
groups of rows that share B's panels in L2,
gives each warp a
`warp_m x warp_n` accumulator fragment ("warp" scope) fed by `mma.sync.m16n8k16`
(ops/tensor_core.py, through `tensorize`), and writes the fragment out through the epilogue in
the same kernel. On sm_90 large problems use `wgmma` instead (ops/wgmma.py: warpgroups
on 128B-swizzled tiles, mma="wgmma"). Its decisions are knobs of template "builtin/gemm_tensorcore"; the default
config is the default schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tensorforge import te, tune
from tensorforge.errors import ScheduleError
from tensorforge.ops.knobs import choose
from tensorforge.ops.tensor_core import (
    EPILOGUES,
    SUPPORTED,
    bulk_rows,
    epilogue_expr,
    mma_store,
    mma_sync,
)
from tensorforge.ops.wgmma import swizzled_fill, tma_fill, tma_store, wgmma_sync
from tensorforge.target import Target, as_target

WARP = 32
PAD = 8  # halves added to each shared row: 16 bytes, so ldmatrix's 8 rows hit distinct banks


SHARED_LIMIT = 227 * 1024  # the most shared memory a block may opt in to on sm_90


@dataclass(frozen=True)
class TensorCoreTiles:
    """A block computes block_m x block_n of D with (block_m / warp_m) x (block_n / warp_n)
    warps; each k step stages block_k columns of A and rows of B in shared memory, `stages`
    copies deep (1: no pipelining; 2: double buffering; 3-4: a cp.async pipeline). Blocks run
    in groups of `group_m` block rows per column of blocks (grid rasterization: a wave of
    blocks reads fewer panels of B, which then stay in L2)."""

    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warp_m: int = 64
    warp_n: int = 64
    stages: int = 4
    group_m: int = 8
    sync: str = "mbarrier"  # the pipeline's: "mbarrier" (warps drift apart) or "barrier"
    cluster: int = 1  # 2: pairs of blocks down a column share B's tile (bulk copies, multicast)
    mma: str = "mma_sync"  # or "wgmma" (sm_90a): warpgroups on 128B-swizzled tiles (ops/wgmma.py)
    fill: str = "cp_async"  # wgmma's tiles: per-thread cp.async, or "tma" (bulk tensor copies)
    store: str = "direct"  # D: each lane's stores, or "tma" (staged in shared, bulk tensor stores)

    @property
    def warps(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n)

    def shared_bytes(self, elem_bytes: int = 2) -> int:
        pad = 0 if self.mma == "wgmma" else PAD  # wgmma's tiles are swizzled, not padded
        a = self.block_m * (self.block_k + pad)
        b = self.block_k * (self.block_n + pad)
        return (a + b) * elem_bytes * max(1, self.stages)

    def group_for(self, m: int) -> int:
        """Block rows per group: the largest divisor of m / block_m up to group_m."""
        rows = m // self.block_m
        return max(g for g in range(1, max(1, self.group_m) + 1) if rows % g == 0)

    @staticmethod
    def for_shape(
        m: int, n: int, k: int, batch: int | None = None, arch: str | None = None
    ) -> TensorCoreTiles:
        """The largest of the usual tiles that divide the problem (tensorize needs whole tiles).
        Problems of a wave of 128 x 256 blocks or more get them, k steps of 64: on sm_90 two
        warpgroups of wgmma (64 x 256 each, a k step's multiplies in flight while the next
        starts; tiles filled by bulk tensor copies, one thread's: H100 fp16 4096^3 623 TFLOP/s,
        8192^3 631, vs 549 and 531 by every thread's cp.async; D staged in shared memory and
        written by bulk tensor stores: 4096^3 681, 8192x3072x768 490 vs 355 by each lane's
        stores), elsewhere 8 warps of 64 x 64
        mma.sync (350-413; 128 x 128: 300-320, a third more L2 traffic a flop; groups of 16
        block rows: 8192^3 413 vs 406 with 8, 372 with 4)."""
        blocks = (m // 128) * (n // 256) * (batch or 1)
        if m % 128 == 0 and n % 256 == 0 and k % 64 == 0 and blocks >= 128:
            if (arch or "").startswith("sm_90") and k >= 3 * 64:
                stages = min(4, k // 64)
                return TensorCoreTiles(128, 256, 64, 16, 256, stages, 16, "mbarrier_lag", mma="wgmma", fill="tma", store="tma")  # fmt: skip
            return TensorCoreTiles(128, 256, 64, 64, 64, min(4, k // 64), 16)
        block_m = _largest_divisor(m, (128, 64, 32, 16))
        block_n = _largest_divisor(n, (128, 64, 32, 16))
        block_k = _largest_divisor(k, (32, 16))
        warp_m = min(64, block_m)
        warp_n = min(64, block_n) if block_m >= 64 else min(32, block_n)
        stages = min(4, k // block_k)  # a copy per k step in flight, at most 4
        return TensorCoreTiles(block_m, block_n, block_k, warp_m, warp_n, stages)

    @staticmethod
    def define(
        cfg, m: int, n: int, k: int, batch: int | None = None, arch: str | None = None
    ) -> TensorCoreTiles:
        base = TensorCoreTiles.for_shape(m, n, k, batch, arch)
        if base.mma == "wgmma":  # warp tiles are fixed by the warpgroups; blocks of 128 x 256
            stages = choose(cfg, "stages", base.stages, [s for s in (3, 4) if s <= k // 64])
            group_m = choose(cfg, "group_m", base.group_m, [4, 8, 16])
            fill = choose(cfg, "fill", base.fill, ["tma", "cp_async"])
            store = choose(cfg, "store", base.store, ["tma", "direct"])
            return replace(base, stages=stages, group_m=group_m, fill=fill, store=store)
        block_m = choose(cfg, "block_m", base.block_m, [b for b in (64, 128, 256) if m % b == 0])
        block_n = choose(cfg, "block_n", base.block_n, [b for b in (64, 128, 256) if n % b == 0])
        block_k = choose(cfg, "block_k", base.block_k, [b for b in (16, 32, 64) if k % b == 0])
        warp_m = choose(cfg, "warp_m", base.warp_m, [w for w in (32, 64) if block_m % w == 0])
        warp_n = choose(cfg, "warp_n", base.warp_n, [w for w in (32, 64) if block_n % w == 0])
        stages = choose(cfg, "stages", base.stages, [1, 2, 3, 4])
        group_m = choose(cfg, "group_m", base.group_m, [1, 4, 8, 16])
        sync = choose(cfg, "sync", base.sync, ["mbarrier", "barrier"])
        return TensorCoreTiles(block_m, block_n, block_k, warp_m, warp_n, stages, group_m, sync)

    def check(self, m: int, n: int, k: int) -> None:
        for name, size, tile in (("M", m, self.block_m), ("N", n, self.block_n), ("K", k, self.block_k)):  # fmt: skip
            if size % tile:
                raise ScheduleError(
                    f"gemm_fp16: {name} = {size} is not a multiple of the {tile} tile; tensor "
                    f"cores need whole 16 x 16 tiles (pad the matrices, or use ops.matmul)"
                )
        if self.block_m % self.warp_m or self.block_n % self.warp_n:
            raise ScheduleError(f"gemm_fp16: warp tiles must divide the block tile ({self})")
        if self.warps > 32:
            raise ScheduleError(f"gemm_fp16: {self.warps} warps are more than a block holds")
        if not 1 <= self.stages <= 8:
            raise ScheduleError(f"gemm_fp16: stages must be 1 to 8, got {self.stages}")
        if self.cluster not in (1, 2):
            raise ScheduleError(f"gemm_fp16: cluster must be 1 or 2, got {self.cluster}")
        shared_sync = ("mbarrier", "mbarrier_lag") if self.fill == "tma" else ("mbarrier",)
        if self.cluster > 1 and (self.sync not in shared_sync or self.stages < 2):
            raise ScheduleError(
                f"gemm_fp16: cluster {self.cluster} shares B's tile through an mbarrier pipeline "
                f"(sync='mbarrier', 2+ stages), got {self}"
            )
        if self.cluster > 1 and self.group_for(m) % self.cluster:
            raise ScheduleError(
                f"gemm_fp16: cluster {self.cluster} pairs blocks of a group of block rows; "
                f"M / block_m = {m // self.block_m} gives groups of {self.group_for(m)}"
            )
        if self.mma not in ("mma_sync", "wgmma"):
            raise ScheduleError(f"gemm_fp16: mma must be 'mma_sync' or 'wgmma', got {self.mma!r}")
        if self.mma == "wgmma" and (
            self.warp_m != 16 or self.warp_n != self.block_n or self.block_k != 64
            or self.block_m % 64 or self.block_n not in (64, 128, 192, 256)
            or self.stages < 2 or not self.sync.startswith("mbarrier")
            or (self.cluster != 1 and self.fill != "tma")
        ):  # fmt: skip
            raise ScheduleError(
                f"gemm_fp16: wgmma takes warp tiles of 16 rows x the whole block_n (64-256), "
                f"block_m a multiple of 64 (warpgroups of 4 warps), k steps of 64 and an "
                f"mbarrier pipeline of 2+ stages, clusters only with TMA fills; got {self}"
            )
        if self.fill not in ("cp_async", "tma") or (self.fill == "tma" and self.mma != "wgmma"):
            raise ScheduleError(
                f"gemm_fp16: fill must be 'cp_async' or 'tma' (wgmma's swizzled tiles only), "
                f"got {self.fill!r} with mma {self.mma!r}"
            )
        if self.store not in ("direct", "tma") or (self.store == "tma" and self.mma != "wgmma"):
            raise ScheduleError(
                f"gemm_fp16: store must be 'direct' or 'tma' (after wgmma), got {self.store!r} "
                f"with mma {self.mma!r}"
            )
        if self.sync == "mbarrier_lag" and (self.mma != "wgmma" or self.stages < 3):
            raise ScheduleError(
                f"gemm_fp16: sync='mbarrier_lag' (a k step's multiplies still in flight when "
                f"the next starts) is for wgmma with 3+ stages; got {self}"
            )
        if self.shared_bytes() > SHARED_LIMIT:
            raise ScheduleError(
                f"gemm_fp16: {self} needs {self.shared_bytes()} bytes of shared memory a block, "
                f"more than the {SHARED_LIMIT} a block may have (fewer stages or smaller tiles)"
            )


def cuda_arch() -> str:
    """The architecture schedules are made for: the current CUDA target's, else the device's
    (sm_90 where there is none)."""
    current = Target.current()
    if current is not None and current.arch:
        return current.arch
    return as_target("cuda").arch


def _largest_divisor(size: int, choices: tuple[int, ...]) -> int:
    for c in choices:
        if size % c == 0:
            return c
    raise ScheduleError(
        f"gemm_fp16: size {size} is not a multiple of 16; tensor cores need whole 16 x 16 tiles "
        f"(pad the matrices, or use ops.matmul)"
    )


def gemm_fp16(
    m: int,
    n: int,
    k: int,
    dtype: str = "float16",
    out_dtype: str | None = None,
    epilogue: str = "none",
    batch: int | None = None,
):
    """D = epilogue(A @ B): A (batch?, m, k) and B (batch?, k, n) of `dtype`, accumulated in
    float32 (C), D of `out_dtype` (default `dtype`); epilogue "bias" adds bias[n] (of
    `dtype`), "bias_gelu" then applies GELU. Returns (A, B, bias or None, C, D)."""
    if dtype not in SUPPORTED:
        raise ScheduleError(f"gemm_fp16: dtype must be one of {', '.join(SUPPORTED)}, got {dtype}")
    if epilogue not in EPILOGUES:
        raise ScheduleError(f"gemm_fp16: epilogue must be one of {', '.join(EPILOGUES)}")
    out_dtype = out_dtype or dtype
    lead = (batch,) if batch is not None else ()
    A = te.placeholder((*lead, m, k), dtype, name="A")
    B = te.placeholder((*lead, k, n), dtype, name="B")
    bias = te.placeholder((n,), dtype, name="bias") if epilogue != "none" else None
    r = te.reduce_axis((0, k), name="k")

    def product(*idx):
        *b, i, j = idx
        return te.sum(A[(*b, i, r)].astype("float32") * B[(*b, r, j)].astype("float32"), axis=r)

    C = te.compute((*lead, m, n), product, name="C")

    def out(*idx):
        j = idx[-1]
        acc = epilogue_expr(C[idx], None if bias is None else bias[j], epilogue)
        return acc.astype(out_dtype)

    D = te.compute((*lead, m, n), out, name="D")
    return A, B, bias, C, D


def schedule_gemm_fp16(
    m: int,
    n: int,
    k: int,
    dtype: str = "float16",
    out_dtype: str | None = None,
    epilogue: str = "none",
    batch: int | None = None,
    tiles: TensorCoreTiles | None = None,
):
    """The tensor-core schedule of `gemm_fp16`. Returns (schedule, args): args are
    [A, B, D] or [A, B, bias, D]."""
    tiles = tiles or TensorCoreTiles.for_shape(m, n, k, batch, cuda_arch())
    tiles.check(m, n, k)
    A, B, bias, C, D = gemm_fp16(m, n, k, dtype, out_dtype, epilogue, batch)
    out_dtype = D.dtype
    s = te.create_schedule(D.op)
    s[C].set_scope("warp")
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    tx = te.thread_axis((0, WARP), "threadIdx.x")
    ty = te.thread_axis((0, tiles.warps), "threadIdx.y")

    *lead, i, j = D.op.axis
    bi, bj, ii, jj = s[D].tile(i, j, tiles.block_m, tiles.block_n)
    wi, ii = s[D].split(ii, factor=tiles.warp_m)
    wj, jj = s[D].split(jj, factor=tiles.warp_n)
    for axis in lead:
        s[D].bind(axis, te.thread_axis("blockIdx.z"))
    group = tiles.group_for(m)
    if group > 1:  # consecutive blocks walk down `group` block rows, then to the next column
        bio, bii = s[D].split(bi, factor=group)
        s[D].reorder(*lead, bio, bj, bii, wi, wj, ii, jj)
        block = s[D].fuse(s[D].fuse(bio, bj), bii)
        s[D].bind(block, te.thread_axis("blockIdx.x"))
    else:
        s[D].reorder(*lead, bi, bj, wi, wj, ii, jj)
        s[D].bind(bi, te.thread_axis("blockIdx.y"))
        s[D].bind(bj, te.thread_axis("blockIdx.x"))
        block = bj
    # ptxas budgets registers for one resident block: up to 255 a thread, enough to keep the
    # fragments of the next k step in flight (without it, 128x256 tiles got 164 registers and
    # every ldmatrix waited right before its mma)
    s[D].pragma(block, "launch_min_blocks", 1)
    if tiles.fill == "tma":  # no fill splits tiles over lanes now: whole warps all the same
        s[D].pragma(block, "block_lanes", WARP)
    if tiles.cluster > 1:  # consecutive blocks (two block rows of a group) share B's tile
        s[D].pragma(block, "cluster_dims", tiles.cluster)
    warp = s[D].fuse(wi, wj)
    s[D].bind(warp, ty)  # one warp per fragment: all 32 lanes run the intrinsics' calls
    lag = tiles.sync == "mbarrier_lag"  # wgmma keeps a step in flight: the store drains it
    if tiles.store == "tma":  # staged in the pipeline's shared tiles, then bulk tensor stores
        store = tma_store(tiles.warp_m, tiles.warp_n, out_dtype, epilogue, dtype)
    else:
        store = mma_store(tiles.warp_m, tiles.warp_n, out_dtype, epilogue, dtype, drain=lag)
    s[D].tensorize(ii, store)

    s[C].compute_at(s[D], warp)
    *_, ci, cj = s[C].op.axis
    (kr,) = s[C].op.reduce_axis
    ko, ki = s[C].split(kr, factor=tiles.block_k)
    s[C].reorder(ko, ci, cj, ki)
    wgmma = tiles.mma == "wgmma"
    if wgmma:
        fence = tiles.fill != "tma"  # the copy engine's writes need no proxy fence
        mma = wgmma_sync(tiles.warp_m, tiles.warp_n, tiles.block_k, dtype, int(lag), fence)
    else:
        mma = mma_sync(tiles.warp_m, tiles.warp_n, tiles.block_k, dtype)
    s[C].tensorize(ci, mma)

    for stage, row_len in ((AS, tiles.block_k), (BS, tiles.block_n)):
        s[stage].compute_at(s[C], ko)
        rows = s[stage].op.axis[-2]
        if not wgmma:
            s[stage].storage_align(rows, row_len, PAD)  # row stride = row_len + PAD halves
        if tiles.fill == "tma":  # the whole tile by one thread's bulk tensor copies (B's shared)
            n_rows = tiles.block_m if stage is AS else tiles.block_k
            share = tiles.cluster if stage is BS else 1
            s[stage].tensorize(rows, tma_fill(n_rows, row_len, dtype, share))
            s[stage].double_buffer(tiles.stages, tiles.sync)
            continue
        if stage is BS and tiles.cluster > 1:  # bulk row copies, each block half of them
            s[stage].tensorize(rows, bulk_rows(tiles.block_k, tiles.block_n, dtype, tiles.cluster))
            s[stage].double_buffer(tiles.stages, tiles.sync)
            continue
        if wgmma:  # 16-byte pieces of rows (each placed by the swizzle), row by row
            cols, vec = s[stage].split(s[stage].op.axis[-1], factor=8)
            rest = s[stage].fuse(rows, cols)
        else:
            fused = s[stage].fuse(*s[stage].op.axis)
            rest, vec = s[stage].split(fused, factor=8)  # 16 bytes a thread
        rest, lane = s[stage].split(rest, factor=WARP)
        _, wy = s[stage].split(rest, factor=tiles.warps)
        s[stage].bind(lane, tx)
        s[stage].bind(wy, ty)
        if wgmma:  # each 16 bytes by cp.async to its place in the swizzled layout wgmma reads
            n_rows = tiles.block_m if stage is AS else tiles.block_k
            s[stage].tensorize(vec, swizzled_fill(n_rows, row_len, dtype))
        else:
            s[stage].vectorize(vec)
        if tiles.stages > 1:  # cp.async fills `stages - 1` k steps ahead of the mma
            s[stage].double_buffer(tiles.stages, tiles.sync)
    args = [A, B, D] if bias is None else [A, B, bias, D]
    return s, args


@tune.template("builtin/gemm_tensorcore")
def gemm_tensorcore_template(
    m: int,
    n: int,
    k: int,
    dtype: str = "float16",
    out_dtype: str | None = None,
    epilogue: str = "none",
    batch: int | None = None,
):
    """`schedule_gemm_fp16` with its tiles as knobs (the default config is the default schedule)."""
    cfg = tune.get_config()
    cfg.add_flop(2.0 * m * n * k * (batch or 1))
    tiles = TensorCoreTiles.define(cfg, m, n, k, batch, cuda_arch())
    return schedule_gemm_fp16(m, n, k, dtype, out_dtype, epilogue, batch, tiles)
