"""Plans of the warp-specialized wgmma GEMM (ops/wgmma_ws.py): the tiles, ring depth, k parts
and consumer arrangement of one kernel, and the choice of one for a problem's sizes."""

from __future__ import annotations

from dataclasses import dataclass, replace

K_STEP = 64  # halves of a k step: one 128-byte swizzled row


@dataclass(frozen=True)
class WsPlan:
    """Tiles of the warp-specialized kernel: 64 * cwg x bn blocks, `stages` k steps in the ring,
    k cut in `split` parts, `blocks` persistent blocks (at most one an SM). `pingpong`: the two
    consumer warpgroups take tiles of 64 * mw x bn in turn (one stores while the other
    multiplies) instead of sharing each."""

    bn: int = 192
    stages: int = 4
    cwg: int = 2
    split: int = 1
    regs: bool = True
    pingpong: bool = False
    mw: int = 1
    staged: bool = False
    inflight: int = 1

    @property
    def bm(self) -> int:
        return 64 * self.mw if self.pingpong else 64 * self.cwg

    def template_args(self, ctype: str, epilogue_code: int) -> str:
        """tf_ws_body's template arguments for this plan."""
        pp = int(self.pingpong)
        return f"{ctype}, {self.bn}, {self.stages}, {epilogue_code}, {self.cwg}, {int(self.regs)}, {pp}, {self.mw}, {int(self.staged)}, {self.inflight}"  # fmt: skip

    def staging_bytes(self) -> int:
        """The consumers' staged output rows (`staged`): 64 * mw (ping-pong) or 64 rows each,
        bn halves and 16 bytes of padding a row."""
        rows = 64 * self.mw if self.pingpong else 64
        return self.cwg * rows * (2 * self.bn + 16) if self.staged else 0

    @property
    def threads(self) -> int:
        return 128 * (self.cwg + 1)

    def shared_bytes(self) -> int:
        return (
            self.stages * (self.bm + self.bn) * 128 + self.staging_bytes() + 1024
        )  # (+ the 1024-byte alignment)

    def tiles(self, m: int, n: int) -> tuple[int, int]:
        return -(-m // self.bm), -(-n // self.bn)

    def units(self, m: int, n: int) -> int:
        tm, tn = self.tiles(m, n)
        return tm * tn * self.split


# k parts a plan may cut: 1, as the split parts measured slow (H200, 2048 x 768 x 3072 in 2
# parts 102 us against 20.8 whole) when they added by atomicAdd of float2, a compare-and-swap
# loop; they add by red.add now, correct on the GPU (tests) but not measured yet
MAX_SPLIT = 1


# ping-pong tiles (64 * mw, bn) a plan may take, and a k step's time on each against 128 x
# 128's: H200, fitted to benchmarks/gpu_ws_gemm.py's sweep (ViT-B/16 and MLP shapes, 2026-11-28):
# 64-row tiles copy more bytes a product (64 x 256: 3 stages beside the staged rows)
PINGPONG_TILES = {(2, 128): 1.05, (1, 256): 1.1, (1, 192): 0.78, (1, 128): 0.56}
PINGPONG_STORE_STEPS = 4  # the last tile's epilogue, in k steps of its tile (not overlapped)
# the cooperative 128 x 256 tile (both consumer warpgroups on one tile, its epilogue not
# overlapped): a k step's time and an epilogue's, in 128 x 128 k steps; it wins only where
# each SM multiplies long (4096^3: 190 us against ping-pong 128 x 128's 207, cuBLAS 176)
COOPERATIVE_STEP, COOPERATIVE_STORE_STEPS = 1.8, 6


def pingpong_stages(bm: int, bn: int, staging: int = 0) -> int:
    """The deepest ring (up to 8 stages) that fits the 227 KB of an SM beside `staging` bytes."""
    return min(8, (227 * 1024 - 2048 - staging) // ((bm + bn) * 128))


def pingpong_plan(mw: int, bn: int, staged: bool = True) -> WsPlan:
    """Ping-pong tiles of 64 * mw x bn, the deepest ring that fits."""
    plan = WsPlan(bn, 1, 2, 1, pingpong=True, mw=mw, staged=staged)
    return replace(plan, stages=pingpong_stages(plan.bm, bn, plan.staging_bytes()))


def choose_pingpong_plan(m: int, n: int, k: int, sm_count: int) -> WsPlan:
    """The plan whose busiest SM finishes first: on ping-pong tiles each SM's tiles multiply
    one after another (the stores overlapping the next tile's multiplies), then its last tile
    stores; on the cooperative 128 x 256 tile each tile multiplies, then stores."""
    steps = -(-k // K_STEP)
    wide = WsPlan(256, 3, 2, 1, staged=True)
    best = wide
    best_cost = COOPERATIVE_STEP * -(-wide.units(m, n) // sm_count) * (steps + COOPERATIVE_STORE_STEPS)  # fmt: skip
    for (mw, bn), step in PINGPONG_TILES.items():
        plan = pingpong_plan(mw, bn)
        per_sm = -(-plan.units(m, n) // sm_count)
        cost = step * (per_sm * steps + PINGPONG_STORE_STEPS)
        if cost < best_cost * 0.97:
            best, best_cost = plan, cost
    return best


def choose_ws_plan(m: int, n: int, k: int, sm_count: int, max_split: int | None = None, pingpong: bool = True) -> WsPlan:  # fmt: skip
    """The plan for D[m, n] = A[m, k] @ B[k, n] on `sm_count` SMs: choose_pingpong_plan's, or
    with pingpong=False (session 19's choice) the cooperative plan whose busiest SM runs the
    fewest k steps (weighted by the tile's columns, plus
    a step's worth for each unit it starts and a fixup for split parts): 128-row tiles of 128,
    192 or 256 columns, k cut in up to `max_split` (MAX_SPLIT) parts where the tiles are too
    few for the SMs. H200 against this cost (GPU time a call): 2048 x 3072 x 768 on 128 x 192
    34.0 us, 128 x 256 43.9; 2048 x 768 x 3072 on 128 x 128 20.8, 128 x 192 29.3, 128 x 256 38.3."""
    if pingpong:
        return choose_pingpong_plan(m, n, k, sm_count)
    steps = -(-k // K_STEP)
    limit = MAX_SPLIT if max_split is None else max_split
    best, best_cost = None, None
    for bn in (128, 192, 256):
        stages = 4 if bn <= 192 else 3
        for split in (s for s in (1, 2, 3, 4, 6, 8) if s <= limit):
            if split > 1 and steps // split < 2:
                break
            plan = WsPlan(bn, stages, 2, split)
            units = plan.units(m, n)
            waves = -(-units // sm_count)
            per_unit = -(-steps // split) + 1 + (2 if split > 1 else 0)
            cost = waves * per_unit * (bn + 64) / 192
            if best_cost is None or cost < best_cost * 0.97:
                best, best_cost = plan, cost
    return best
