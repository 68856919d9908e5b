"""The first guess with no measurement: the sketch rules' decisions taken by a model of the target.

In the spirit of Mullapudi2016 and TVM's rule-based schedules: the register tile is sized to the
vector registers (accumulators + one vector operand + one broadcast fit, FMAs per load as high as
possible, little waste at the edges), the reduction block and the accumulator tile to L1 and L2,
the parallel loop to the cores; vector partials for row reductions; costly intermediates computed
once per row rather than inlined into each reader. On CUDA the tiles, shared-memory slices and
their padding come from analytic_gpu.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.runtime.native_call import num_threads
from tensorforge.te.tensor import ComputeOp
from tensorforge.te.visit import walk
from tensorforge.tune.auto import analytic_gpu
from tensorforge.tune.auto.decisions import Decisions, divisors

MAX_TILE_ROWS = 8  # register tile rows (ops/matmul: 6 of 16 ymm registers, 8 of 32 zmm)
MAX_TILE_VECTORS = 2  # register tile columns, in vectors
BLOCK_PANELS = 2  # register tiles across an accumulator block (ops/matmul on AVX-512: nb = 2 nr)
TAIL_ROWS = 0.01  # the share of rows a guarded tail block may hold (4 of 1024, not 4 of 256)
FMAS_IN_FLIGHT = 10  # independent accumulators that keep both FMA units busy


@dataclass(frozen=True)
class Machine:
    """What the model knows of the target."""

    lanes_bits: int  # vector register width
    registers: int  # vector registers
    l1: int  # bytes per core
    l2: int
    cores: int
    gpu: bool = False
    line: int = 64  # cache line bytes (every x86 core)

    @staticmethod
    def of(target: Any) -> Machine:
        """From the target's facts, not this host's: a first guess for `llvm -mcpu=X` is the
        same wherever it is made. Caches: the target's (Target.cache_bytes: a named CPU's
        from its table, this host's from the OS, else 32 KiB L1 and 512 KiB / 1 MiB L2).
        Cores: TF_NUM_THREADS at build time, else this host's count. A kernel planned for
        one thread has no parallel loop (planned for 8 cores whatever the build, the loops
        fused for parallelism kept tail-block guards LLVM could not hoist: 1x1 conv 64 -> 256
        at 56² 0.40x the hand schedule at 1 thread, GEMM 1024³ at -mcpu=znver3 0.34x); the
        graph layer's cache is keyed on the thread count, so a model built at 1 thread is
        built again for 2."""
        if target.kind == "cuda":  # registers per thread, shared memory per block, SMs
            regs, shared = target.registers_per_thread, target.max_shared_memory_per_block
            return Machine(128, regs, shared, 256 * 1024, target.sm_count, gpu=True)
        bits = target.vector_bits
        l1, l2 = target.cache_bytes
        return Machine(bits, 32 if bits >= 512 else 16, l1, l2, num_threads())


class AnalyticPolicy:
    """Answers the sketch rules' decisions from the machine model (decisions.Policy)."""

    def __init__(self, target: Any):
        self.target = target
        self.machine = Machine.of(target)
        self._tiles: dict[str, tuple[int, int]] = {}  # stage -> its register tile (rows, columns)

    # -- choices --------------------------------------------------------------------------------
    def choice(self, key: str, options: Sequence[Any], hint: dict) -> Any:
        kind = key.split(":", 1)[0]
        if kind == "inline":  # inline cheap things; compute costly shared ones (and padding) once
            return self.inline_identity(hint)
        if kind in ("cw", "cols"):
            return True
        if kind == "prefetch":  # long rows: fetch the next while working on this one
            # NOTE: not rows past L1: the next one would not stay there until it is read, and
            # its prefetch region is no longer one line a step where the row is a reshape of
            # several axes (group norm's 64 x 64 planes: the whole plane at every step, 256
            # prefetches per vector; UNet block's group norm + SiLU 269 -> 160 us)
            row_bytes = hint.get("row_bytes")
            fits = row_bytes is None or row_bytes <= self.machine.l1
            return hint.get("row", 0) >= 8 and fits
        if kind == "pack":  # rows 2 KiB or more apart alias in L1: copy the panel contiguous
            return hint.get("row_elements", 0) * 4 >= 2048
        if kind == "loc":  # rows next to their readers; a padded input whole, before its reader
            opts = hint.get("options") or []
            if not opts:
                return -1
            if hint.get("feeds_tiling") and not hint.get("reduction"):
                return -1
            # at the innermost loop of the stage's own rows: softmax over (1, 12, 500, 500),
            # 1 thread, 6000 rows one at a time 1.63 ms, all at the batch loop of extent 1 3.41
            # (12 MB of exps staged); (1, 6, 197, 197), whose 0.9 MB of exps L2 holds: 145 vs
            # 117 us the other way round (AVX2 code 212 vs 194)
            return max(0, hint.get("rows", 0) - 1)
        if kind == "rf":
            extent, lanes = hint.get("extent", 1), hint.get("lanes", 1)
            for width in (4 * lanes, 2 * lanes, lanes):
                if width in options and extent >= 2 * width:
                    return width
            return 0
        if kind == "win":  # the target's vector of window outputs, else the widest that fits
            # a short row: fewest vectors. The last one's lanes past the row are clamped and
            # peeled off (56 outputs at 16 lanes: 4 vectors, 1 thread, AVX-512: max pool 3x3/2
            # 0.146 ms vs 0.205 as 7 x 8 lanes, avg pool 0.128 vs 0.143)
            extent, widths = hint.get("extent", 1), [w for w in options if w]
            fits = [w for w in widths if w <= extent]
            return max(fits or [0])
        if kind == "par":
            if self.machine.cores == 1:  # a parallel loop on one thread only costs
                return 0
            extents = hint.get("extents", [])
            want = 4 * self.machine.cores
            for n in range(1, len(extents) + 1):
                if math.prod(extents[:n]) >= want:
                    return n
            return len(extents)
        if kind == "unroll":  # GPU: the whole k slice of register-tile updates, straight-line
            want = max(options) if self.machine.gpu else 16
            return want if want in options else options[0]
        if kind == "fvec":  # float4 cooperative fetches where legal
            return max(options)
        if kind == "db":  # two copies of each shared tile: the next slice loads during this one
            return 2 if 2 in options else options[0]
        if kind == "pad":
            return analytic_gpu.shared_pad(options, hint)
        if kind == "threads":
            return 256 if 256 in options else options[len(options) // 2]
        if kind == "kunroll":
            return True
        if kind == "acc":  # a single k block and no packed panel: accumulate in registers
            return True
        if kind == "kstep":  # 4 k steps per loop step, as ops/matmul's micro-kernel
            return max(u for u in options if u <= 4)
        if kind == "shared":
            return True
        return None

    def inline_identity(self, hint: dict) -> bool:
        """A padding of 0 is the input itself: read it in place where the tiled reader's rows
        are a register tile wide (up to 4 vectors, cpu_tiles' whole row), each k step then
        reading whole rows of adjacent lines (1x1 conv 64 -> 256 at 56², AVX-512: 0.461 ->
        0.451 ms; + BN + ReLU 0.522 -> 0.486). Rows cut into several tiles read a line from
        each of 64 channel rows a step, too many streams for the prefetchers, where the copy
        had streamed them into L2 (the same at AVX2's 8 lanes: 0.89 -> 1.33 ms)."""
        op = hint.get("op")
        if not hint.get("identity") or op is None:
            return False
        lanes = self.target.vector_lanes(op.output(0).dtype)
        return 0 < hint.get("reader_row", 0) <= 4 * lanes

    # -- tiles ----------------------------------------------------------------------------------
    def tile(self, key: str, extents: Sequence[int], levels: int, hint: dict) -> Any:
        kind = key.split(":", 1)[0]
        if kind == "vec":
            (extent,) = extents
            lanes = hint.get("lanes", 1)
            line = max(lanes, self.machine.line // hint.get("bytes", 4))
            fit = _fit if not hint.get("symbolic") else _fit_any
            if hint.get("streams") and not hint.get("lane_math") and extent >= 8 * line:
                # rows streamed from memory (fetched a row ahead) with little arithmetic a
                # lane: a cache line a step, as ops' layer norm (4096², AVX-512: 4 vectors a
                # step 0.96x the hand schedule, one line 1.0x)
                return [[fit(extent, line, lanes)]]
            # else 4 vectors, whose independent chains hide a math call's latency (softmax's
            # division, 4096²: one line a step 4% slower)
            return [[fit(extent, 4 * lanes, lanes)]]
        if kind == "tile" and levels == 4 and not self.machine.gpu:
            tiles = self.cpu_tiles(hint)
            row = _row_axis(hint["op"])
            rows = tiles[row][-1] if row is not None else 1
            self._tiles[key.split(":", 1)[1]] = (rows, tiles[-1][-1])
            return tiles
        if kind == "rtile" and levels == 2 and not self.machine.gpu:
            return self.cpu_reduce_tiles(hint, self._tiles.get(key.split(":", 1)[1]))
        if kind == "gtile" and self.machine.gpu:
            return analytic_gpu.tiles(extents, levels, hint, self.machine)
        if kind == "grtile" and self.machine.gpu:  # reduction slices staged in shared memory
            return analytic_gpu.reduce_tiles(extents, levels, hint)
        return None

    def cpu_tiles(self, hint: dict) -> list[list[int]]:
        """S0 S1 S2 S3 per spatial axis: S3 the register tile (rows x vectors), S2 the L2 block."""
        spatial, lanes, op = hint["spatial"], hint["lanes"], hint["op"]
        n = len(spatial)
        row = _row_axis(op)
        if row == n - 1:
            row = None
        last = spatial[-1]
        rows_extent = spatial[row] if row is not None else 1
        panel = _panel_width(op)
        # the accumulator block: two register tiles wide and as tall as a quarter of L2 holds
        # (all the rows, mostly). The block's B panel is packed once per k block and serves
        # every row; shorter blocks pack each panel again for each block of rows, a strided
        # copy from L3 (GEMM 1024³, AVX2: 48 x 128 blocks 0.61x the hand schedule, 1024 x 32
        # 0.8x)
        block_floats = self.machine.l2 // 4 // 4
        best, best_score = (1, 1, 1), -1.0
        # the micro-kernel of the hand schedule (ops/matmul): two vectors wide, 6 rows of 16
        # ymm registers, 8 of 32 zmm (GEMM 512³, AVX2: 4 x 2 vectors 0.8x the hand's 6 x 2,
        # 2 x 4 vectors 0.5x, 8 x 1 vector 0.5x: a wider row streams more of B per broadcast)
        # and a whole row of up to 4 vectors, its last one partial (ops' conv2d: 56 columns
        # as 4 vectors; 1x1 conv 64 -> 256 at 56², AVX-512: 4 x 56 tiles 1.0x the hand
        # schedule, 8 x 32 with a 24-column tail block 0.7x)
        whole = -(-last // lanes) if MAX_TILE_VECTORS * lanes < last <= 4 * lanes else 0
        for mr in range(1, min(rows_extent, MAX_TILE_ROWS) + 1):
            for v in [*range(1, MAX_TILE_VECTORS + 1), *([whole] if whole else [])]:
                if mr * v + v + 1 > self.machine.registers - 1 or (row is None and mr > 1):
                    continue
                nr = _vector_tile_width(min(v * lanes, last), lanes)
                if nr < v * lanes and v > 1 and v != whole:
                    continue
                if panel and panel % nr and v > 1:  # a vector tile across two panels gathers
                    continue
                columns = _fit_blocks(last, nr, BLOCK_PANELS) * nr
                block = _block_rows(rows_extent, mr, max(1, block_floats // columns))
                flops_per_load = mr * (nr / lanes) / (mr + v)
                # FMAs in flight: 2 units x 4-5 cycles want ~10 independent accumulators
                in_flight = min(1.0, mr * v / FMAS_IN_FLIGHT)
                # rows past the last whole block: a peeled block, guarded throughout. Where
                # LLVM hoists its guards (GEMM: 4 of 1024 rows) it costs its share; where not
                # (a window reduction: conv2d, 4 of 64 filters: 0.7x the hand schedule, 4-row
                # tiles 0.96x; 1 of 256 at AVX2: 3.55 ms, 4-row tiles 2.79) as much as a whole
                # block: a few tail rows only, and none under a window
                tail = (rows_extent % block) / rows_extent
                hoisted = len(hint["reduce"]) <= 1  # a GEMM's tail: LLVM hoists its guards
                cheap_tail = tail <= TAIL_ROWS and (hoisted or tail == 0)
                score = flops_per_load * in_flight * (1 - tail if cheap_tail else 0.6)
                # a vector tile that does not divide the vector axis: masked vectors in a
                # peeled block (conv2d, 56 columns in 16s: 0.96x)
                if last % nr:
                    score *= 0.85 * last / _round_up(last, nr)
                if score > best_score + 1e-9:
                    best, best_score = (mr, nr, block), score
        mr, nr, block = best
        tiles = [[1, 1, 1] for _ in range(n)]
        tiles[-1][2] = nr
        tiles[-1][1] = _fit_blocks(last, nr, BLOCK_PANELS)
        if row is not None:
            tiles[row][2] = mr
            tiles[row][1] = block // mr
        return tiles

    def cpu_reduce_tiles(self, hint: dict, tile: tuple[int, int] | None) -> list[list[int]]:
        """R1 per reduction axis: small axes whole, the rest blocked so that the register
        tile's panel of the vector operand (R1 x its columns), packed once per block and reused
        by every row tile of the block, fits a quarter of L2, as ops/matmul's k blocks on
        AVX-512 (GEMM 1024³: k blocks of 1024 0.92x the hand schedule, of 512 0.85x, of 256
        0.83x; AVX2: 1024 0.97x, 256 0.91x, 128 0.83x)."""
        reduce = hint["reduce"]
        # the columns read, not the register tile's width: lanes past a short row are masked
        # off (14 columns in a 16-lane tile), and the panel they would count splits the
        # reduction, leaving the accumulators in memory (conv2d 3x3 256 ch at 14², AVX2: 10.4
        # ms, 3.0 one block)
        columns = min(tile[1], hint["spatial"][-1]) if tile else hint.get("lanes", 1)
        budget = max(1, self.machine.l2 // 4 // (4 * columns))
        tiles = []
        for extent in reversed(reduce):
            if extent <= 8:
                inner = extent
            else:
                inner = _best_divisor(extent, budget) or min(extent, budget)
            budget = max(1, budget // inner)
            tiles.append([inner])
        return list(reversed(tiles))


def _vector_tile_width(columns: int, lanes: int) -> int:
    """A register tile's width for `columns` output columns: its last vector's lanes rounded up
    to a power of two. Arithmetic on a width that is not one goes in power-of-two pieces (14
    lanes: 8 + 4 + 2, three FMAs and three loads a row), while the lanes past the row are off in
    a mask known lane by lane and cost nothing (conv2d 3x3 256 ch at 14², AVX-512: 14-lane
    tiles 2.94 ms, 16-lane 1.69 ms)."""
    tail = columns % lanes
    if tail == 0 or tail & (tail - 1) == 0:
        return columns
    return columns - tail + (1 << tail.bit_length())


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def _fit(extent: int, want: int, step: int) -> int:
    """A vector-friendly inner extent: `want` (a multiple of `step`) or less, not above extent."""
    if extent <= want:
        return extent
    for size in range(want, step - 1, -step):
        if extent % size == 0:
            return size
    return want


def _fit_any(extent: int, want: int, step: int) -> int:
    """`_fit` for an extent known only at run time (`extent`: its hint): `want`, or as many
    `step`s as cover a shorter hint; never a divisor of the hint (the size changes) nor a width
    that is not whole `step`s (the last vector's lanes past the row are masked off)."""
    return min(want, _round_up(max(1, extent), step))


def _fit_blocks(extent: int, tile: int, want: int) -> int:
    """How many `tile`s a block holds: up to `want`, preferring a count that divides evenly."""
    count = max(1, extent // tile)  # blocks never reach past the extent
    if count <= want:
        return count
    return _best_divisor(count, want) or want


def _block_rows(extent: int, tile: int, at_most: int) -> int:
    """Rows of an accumulator block: a multiple of `tile`, at most `at_most` (and `extent`)
    rows, leaving the fewest rows past the last whole block (then the tallest)."""
    tiles = max(1, min(extent, at_most) // tile)
    count = min(range(1, tiles + 1), key=lambda k: (extent % (k * tile), -k))
    return count * tile


def _best_divisor(n: int, at_most: int) -> int | None:
    """The largest divisor of n not above at_most, if it is at least half of at_most."""
    good = [d for d in divisors(n) if d <= at_most]
    best = max(good) if good else None
    return best if best is not None and best * 2 >= min(at_most, n) else None


def _panel_width(op: ComputeOp) -> int | None:
    """The width of the panels an operand is packed in along the last spatial axis (`B[j // 16,
    k, j % 16]`, as the torch backend packs weights), or None: a register tile wider than a
    panel, or not dividing it, reads its vectors across two panels (a gather per load)."""
    from tensorforge.te.expr import Const, FloorDiv, FloorMod

    last = op.axis[-1].var if op.axis else None
    widths = []
    for body in op.body:
        for node in walk(body):
            if (
                isinstance(node, (FloorDiv, FloorMod))
                and isinstance(node.b, Const)
                and isinstance(node.b.value, int)
                and node.b.value > 1
                and any(n is last for n in walk(node.a))
            ):
                widths.append(node.b.value)
    return math.gcd(*widths) if widths else None


def _row_axis(op: ComputeOp) -> int | None:
    """The spatial axis (other than the last) to unroll rows of the register tile along: one along
    which an operand that is broadcast across the last axis varies, while the vector operand does
    not (matmul: i, for A[i, k]; conv NCHW: f, for weight[f, ...])."""
    from tensorforge.te.expr import TensorRead

    spatial = [iv.var for iv in op.axis]
    if len(spatial) < 2:
        return None
    reads = [n for b in op.body for n in walk(b) if isinstance(n, TensorRead)]

    def uses(read: Any, var: Any) -> bool:
        return any(n is var for index in read.indices for n in walk(index))

    last = spatial[-1]
    broadcast = [r for r in reads if not uses(r, last)]
    vector = [r for r in reads if uses(r, last)]
    for k in range(len(spatial) - 2, -1, -1):
        var = spatial[k]
        if any(uses(r, var) for r in broadcast) and not any(uses(r, var) for r in vector):
            return k
    return None


def first_guess(task: Any) -> Any:
    """The analytic model's trace for `task` (no measurement)."""
    decisions = Decisions(0, policy=AnalyticPolicy(task.target_obj))
    trace, _, _ = task.generate(decisions)
    return trace


def first_guess_schedule(
    outputs: Any, target: Any = None, size_hints: dict | None = None
) -> tuple[Any, list]:
    """The first guess for any te computation, given its output tensors (no workload function,
    no arguments): `(schedule, steps)`. For callers that build kernels on the fly (the
    torch.compile backend's fused groups) and have no tuning record for them. Sizes known only
    at run time (te.vars in the shapes) are sized by `size_hints` (te.var -> a typical value),
    where the caller has them."""
    from tensorforge.target import as_target
    from tensorforge.te import create_schedule
    from tensorforge.tune.auto.sketch import generate

    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    target = as_target(target)
    s = create_schedule([t.op for t in outputs])
    with target:
        steps = generate(s, target, Decisions(0, policy=AnalyticPolicy(target)), size_hints)
    return s, steps
