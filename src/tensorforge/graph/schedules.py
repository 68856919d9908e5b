"""A schedule for each kernel the graph layer makes: the anchor's own (matmul, conv2d, row
operators, reductions, windows) with the element-wise epilogue as the stage it is computed in,
or a rule-based one for element-wise kernels (CPU: parallel chunks, vectors with tails; CUDA:
blocks of threads, a few contiguous elements each).

The kernel's output stage is the epilogue; the anchor's reduction stages are computed at its
loops (`compute_at`), so the epilogue reads each result while it is in registers or cache.
"""

from __future__ import annotations

import math
import os

from tensorforge import te
from tensorforge.graph import schedules_cuda
from tensorforge.graph.lower_linalg import matmul_tiles
from tensorforge.graph.schedules_cpu_dot import schedule_cpu_dot
from tensorforge.graph.values import numel, opmath_dtype
from tensorforge.ops.conv2d import filter_block
from tensorforge.te import dtype as dt

PARALLEL_MIN_ELEMENTS = 1 << 14  # below this, one thread: waking the pool costs more
PANEL_PREFETCH_BYTES = 1 << 20  # two weight panels and the left matrix: L2 holds them
CHUNK = 4096  # elements each parallel iteration of an element-wise kernel walks

SOURCES = {
    None: "rule-based element-wise",
    "matmul": "matmul: register-tiled panels (ops/matmul schedule)",
    "conv2d": "conv2d: direct, register-tiled (ops/conv2d schedule)",
    "softmax": "row operator: one row per task (ops/softmax schedule)",
    "layer_norm": "row operator: one row per task (ops/layer_norm schedule)",
    "reduce": "reduction: computed at its epilogue's elements",
    "window": "window reduction: computed at its epilogue's elements",
}


# anchors whose schedule by hand (the ops library's) the first guess does not beat: "auto" keeps
# it. Measured per kernel (1 thread, rules / first guess): matmul 0.63-1.19 (small ones lose);
# direct conv2d + epilogue 1.7-2.1, softmax 1.5-3.5, layer norm 1.7-6.5, element-wise 1.2-7.6
HAND_SCHEDULED = ("matmul",)


def _hand_scheduled(spec, target) -> bool:
    """Whether "auto" keeps the rules' schedule: HAND_SCHEDULED anchors, layer norms of gathered
    rows, and softmax rows of whole vectors (the rules' vector accumulators). The first guess
    once combined 64 partials a row one after another there (12 x 128 x 128 at 1 thread, 441
    against 128 us); since ir/passes/vectorize_partial_combines the two are even (96 and 98 us;
    emb + layer norm 8 x 128 x 256: 49 and 51 us). Rows with a tail keep the first guess
    (64 x 1000: 39 against 781 us)."""
    kind = spec.anchor.kind if spec.anchor is not None else None
    if kind in HAND_SCHEDULED:
        return True
    if kind is None:
        return _transposed_axes(spec.out) is not None
    if kind == "layer_norm" and any(b.dtype.startswith(("int", "uint")) for b in spec.reads):
        # rows gathered by indices (embeddings + layer norm): the first guess's loads of them
        # do not vectorize; rows of whole vectors keep the rules' (8 x 128 x 256, 1 thread:
        # 382 -> 120 us)
        m = getattr(spec.out.shape[-1], "value", None)
        return _whole_vectors(m, target.vector_lanes(opmath_dtype(spec.out.dtype)))
    if kind != "softmax":
        return False
    m = getattr(spec.out.shape[-1], "value", None)
    return _whole_vectors(m, target.vector_lanes(opmath_dtype(spec.out.dtype)))


FIRST_GUESS = "first guess (auto-scheduler, no measurement)"


def schedule_kernel(
    spec,
    target,
    simple: bool = False,
    s=None,
    schedule: str = "rules",
    size_hints: dict | None = None,
):
    """The schedule of one KernelSpec, and the name of the rule that made it. `simple`: the
    plainest correct one (what a kernel falls back to if its own schedule fails to build).
    `s`: a fresh schedule of the kernel to apply the rule to (tuning.py records the calls).
    `schedule` (the backend's option): "rules"; "first_guess": the auto-scheduler's first guess
    where it applies (CPU: static sizes, and row operators of run-time sizes given their
    `size_hints`, te.var -> example value; CUDA: `schedules_cuda.wants_staged_gemm`'s products);
    "auto": the first guess except for HAND_SCHEDULED."""
    out = spec.out
    if schedule != "rules" and not simple and s is None:
        guessed = _first_guess(spec, target, schedule, size_hints or {})
        if guessed is not None:
            return guessed, FIRST_GUESS
    if s is None:
        s = te.create_schedule(out.op)
    anchor = spec.anchor
    kind = anchor.kind if anchor is not None else None
    if simple:
        if anchor is not None and target.kind != "cuda":
            _reduction(s, out, anchor, target, vectorize=False)
        elif target.kind == "cuda":
            schedules_cuda.schedule_simple(s, out, anchor)
        return s, "simple (fallback: its own schedule failed)"
    if target.kind == "cuda":
        return s, schedules_cuda.schedule_cuda(s, out, anchor)
    if kind is None:
        if _transposed_axes(out) is not None:
            _transpose(s, out)
            return s, TRANSPOSE_SOURCE
        _elementwise(s, out, target)
    elif kind == "matmul" and "cpu_dot" in anchor.info:
        return s, schedule_cpu_dot(s, out, anchor, target)
    elif kind == "matmul":
        _matmul(s, out, anchor, target)
    elif kind == "conv2d":
        _conv2d(s, out, anchor, target)
    elif kind in ("softmax", "layer_norm"):
        _rows(s, out, anchor, target)
    else:
        _reduction(s, out, anchor, target)
    return s, SOURCES[kind]


def _first_guess(spec, target, schedule: str, size_hints: dict):
    """The auto-scheduler's first guess for the kernel (tune.auto.analytic), or None where the
    rules serve: CUDA kernels other than large products and split-K convolutions' partial
    products (schedules_cuda.wants_staged_gemm),
    symbolic sizes (but for row operators: `_guesses_run_time_rows`), a hand-scheduled anchor
    under "auto", or a computation the sketch rules cannot schedule."""
    from tensorforge.tune.auto.analytic import first_guess_schedule

    if target.kind == "cuda":
        if not schedules_cuda.wants_staged_gemm(spec.anchor, target):
            return None
    elif schedule == "auto" and _hand_scheduled(spec, target):
        return None
    elif spec.anchor is not None and "cpu_dot" in spec.anchor.info:
        return None  # the micro-kernel's calls are the product's schedule
    tensors = [b.placeholder for b in spec.reads] + [spec.out]
    static = all(isinstance(getattr(e, "value", None), int) for t in tensors for e in t.shape)
    if not static and not _guesses_run_time_rows(spec, target, tensors, size_hints):
        return None
    try:
        with target:
            s, _ = first_guess_schedule([spec.out], target, size_hints if not static else None)
    except Exception:  # any failure of the sketch rules: the graph layer's own rules instead
        return None
    return s


ROW_ANCHORS = ("softmax", "layer_norm")


def _guesses_run_time_rows(spec, target, tensors, size_hints: dict) -> bool:
    """Whether the first guess schedules a kernel of sizes known only at run time: a row
    operator (softmax, log-softmax, layer norm) on the CPU, each of whose size variables has a
    hint to size its vectors and partials by. Its splits leave the last vector of a row masked
    and its rows unguarded, so one kernel serves every size; the rules' (16-lane steps, two
    partials, a parallel loop even at one thread) ran 1.3-1.4x slower than the static first
    guess: 64 x 1000 softmax 24.1 against 18.2 us a call, 1 thread."""
    from tensorforge.te.expr import Var
    from tensorforge.te.visit import walk

    kind = spec.anchor.kind if spec.anchor is not None else None
    if target.kind == "cuda" or kind not in ROW_ANCHORS:
        return False
    sizes = {n for t in tensors for e in t.shape for n in walk(e) if isinstance(n, Var)}
    return all(v in size_hints for v in sizes)


def _static_numel(tensor) -> int | None:
    sizes = [getattr(e, "value", None) for e in tensor.shape]
    return None if any(not isinstance(v, int) for v in sizes) else numel(sizes)


def _worth_threads(tensor) -> bool:
    size = _static_numel(tensor)
    return size is None or size >= PARALLEL_MIN_ELEMENTS


TRANSPOSE_TILE = 16  # a tile of a transposing copy: 16 x 16 elements, a cache line each way
TRANSPOSE_SOURCE = "transpose: 16 x 16 tiles"


def _transposed_axes(out) -> tuple[int, int] | None:
    """(a, b): for a copy whose one read runs along output axis `a` (the second-last) in its
    input's last axis, and not along the output's last axis `b`: a transpose, such as
    attention's K^T. None for anything else."""
    from tensorforge.te.expr import Cast, TensorRead, Var
    from tensorforge.te.tensor import PlaceholderOp
    from tensorforge.te.visit import walk

    body = out.op.body[0] if out.op.body else None
    while isinstance(body, Cast):
        body = body.value
    axes = out.op.axis
    if len(axes) < 2 or not isinstance(body, TensorRead):
        return None
    if not isinstance(body.tensor.op, PlaceholderOp):
        return None
    used = {n for n in walk(body.indices[-1]) if isinstance(n, Var)}
    if axes[-1].var in used or axes[-2].var not in used:
        return None
    return len(axes) - 2, len(axes) - 1


def _elementwise(s, out, target) -> None:
    axes = s[out].op.axis
    if not axes:
        return
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    width = target.vector_lanes(opmath_dtype(out.dtype) if out.dtype != "bool" else "int8") * 2
    chunk, step = s[out].split(fused, factor=CHUNK)
    _, vector = s[out].split(step, factor=width)
    s[out].vectorize(vector)
    if _worth_threads(out):
        s[out].parallel(chunk)


def _transpose(s, out) -> None:
    """A transposing copy in 16 x 16 tiles: the inner loop (unrolled) takes one element from
    each of 16 input lines into one output line; the 16 lines are read whole over the tile's
    16 steps along the output's second-last axis (GPT-2 block's K^T, 12 x 64 x 128, 1 thread,
    in cache: 14 us; 32 us with vectors along the output, which gather, or the loops swapped)."""
    *outer, a, b = s[out].op.axis
    # a size known at run time (K^T's sequence length): whole tiles unguarded, the last
    # partial one peeled (guarded, each element tested its row and column: GPT-2 block's K^T
    # under dynamic=True ran rule-based element-wise, 409 us against 33 so)
    bo, bi = _tile_split(s[out], b, out.shape[-1])
    ao, ai = _tile_split(s[out], a, out.shape[-2])
    s[out].reorder(*outer, ao, bo, ai, bi)
    s[out].unroll(bi)
    tasks = s[out].fuse(*outer, ao) if outer else ao
    if _worth_threads(out):
        s[out].parallel(tasks)


def _tile_split(stage, axis, extent):
    """`axis` split in transpose tiles; of a run-time extent, with the last partial tile peeled.
    (A static kernel's calls are recorded as a trace, whose split has no tail mode.)"""
    if isinstance(getattr(extent, "value", None), int):
        return stage.split(axis, factor=TRANSPOSE_TILE)
    return stage.split(axis, factor=TRANSPOSE_TILE, tail="peel")


def _matmul(s, out, anchor, target) -> None:
    """ops/matmul's panel schedule: nr-column panels, mr-row tiles accumulated in registers over
    all of k, the epilogue applied to each tile as it is stored."""
    (C,) = anchor.info["stages"]
    mr, nr = anchor.info.get("mr"), anchor.info.get("nr")
    if mr is None:
        mr, nr = matmul_tiles(target, opmath_dtype(out.dtype))
    *batch, i, j = s[out].op.axis
    n = anchor.info["shape"][-2]
    if isinstance(n, int):
        mr = max(1, min(mr, n))
    jo, ji = s[out].split(j, factor=nr)
    # rows known only at run time (a dynamic batch): full row tiles in a loop of their own,
    # unguarded, and the last partial tile after it; guarded, every FMA row of every tile
    # tested its row against the count (MLP b64 under dynamic=True 2.6x slower than static)
    if isinstance(n, int):
        io, ii = s[out].split(i, factor=mr)
    else:  # (a static kernel's calls are recorded as a trace, whose split has no tail mode)
        io, ii = s[out].split(i, factor=mr, tail="peel")
    m = anchor.info["shape"][-1]
    rows_outer = isinstance(m, int) and m <= 4 * nr
    if rows_outer:
        # a few column panels (a late conv layer's 7 x 7 outputs): row tiles outside, so the
        # left matrix (its weights, megabytes) streams once and the panels stay in cache
        s[out].reorder(*batch, io, jo, ii, ji)
    else:
        s[out].reorder(*batch, jo, io, ii, ji)
    s[out].vectorize(ji)
    # NOTE: the column panels are not fused with the batch loops: fused, a partial last panel
    # puts its guard on every load and store of every panel (a 25x slower conv as im2col GEMM
    # at 14 x 14 outputs); unfused, the split peels that panel into a loop of its own
    shape = anchor.info["shape"]
    real_batch = [ax for ax, size in zip(batch, shape) if not (isinstance(size, int) and size == 1)]
    outer = real_batch[0] if real_batch else (io if rows_outer else jo)
    if _worth_threads(out) or anchor.info.get("k", 1) >= 256:
        s[out].parallel(outer)
    s[C].compute_at(s[out], jo if rows_outer else io)
    *cb, ci, cj = s[C].op.axis
    (ck,) = s[C].op.reduce_axis
    ko, ki = s[C].split(ck, factor=4)
    s[C].reorder(*cb, ko, ki, ci, cj)
    s[C].unroll(ki)
    s[C].unroll(ci)
    s[C].vectorize(cj)
    panels = anchor.info.get("panels")
    packed = _read_of(C, panels) if panels is not None and not rows_outer else None
    k = anchor.info.get("k")
    if packed is not None and _prefetch_next_panel(anchor.info, packed):
        # the next column panel: [panels, k, nr] is contiguous, so the k rows one panel
        # (k // 4 iterations of ko) ahead are the same rows of the next panel
        s[C].prefetch(packed, ko, -(-k // 4))


def _prefetch_next_panel(info, packed) -> bool:
    """Whether the row tiles of a weight panel prefetch the next panel, as they walk k: where
    there are several row tiles (one alone streams each panel once, which the hardware
    prefetcher follows: MLP at batch 1 ran 5% slower with it) and two panels and the left
    matrix fit in L2 (fc2 of GPT-2, k = 3072, ran 3% slower). GPT-2 block at 1 thread, the same
    memory, the two codes interleaved, min thread time of 30 (load ~0.9): qkv 2218 -> 2029 us,
    proj 754 -> 710, fc1 3024 -> 2808; whole block 1.01-1.03x Inductor -> 1.09-1.11x, MLP at
    batch 64 1.12-1.14x -> 1.19x (benchmarks/torch_models.py, separate runs)."""
    if os.environ.get("TENSORFORGE_PANEL_PREFETCH", "1") in ("0", ""):
        return False
    k, n, mr = info.get("k"), info["shape"][-2], info.get("mr")
    nr = getattr(packed.shape[-1], "value", None)
    if not all(isinstance(v, int) for v in (k, nr, mr)):
        return False
    if not isinstance(n, int):
        # rows known at run time (a sequence under dynamic=True): where the two panels take
        # at most half of L2's share, the left matrix's rows the rest (GPT-2's k = 768 layers
        # prefetch, fc2's k = 3072 does not, as at 128 rows statically). GPT-2 block seq 128,
        # dynamic, 1 thread: qkv 2050-2094 -> 1912-1924 us (static 1802-1932), fc1 2822-2940
        # -> 2725-2822 (static 2505-2640)
        return 2 * (4 * 2 * k * nr) <= PANEL_PREFETCH_BYTES
    if n <= mr:
        return False
    return 4 * (2 * k * nr + n * k) <= PANEL_PREFETCH_BYTES


def _read_of(C, name: str):
    """The tensor named `name` that stage C reads (the matmul's packed weight panels,
    [panels, k, nr], whose buffer the lowering names in its anchor's info); None if C does not."""
    from tensorforge.te.expr import TensorRead
    from tensorforge.te.visit import walk

    for node in walk(C.op.body[0]):
        if isinstance(node, TensorRead) and node.tensor.op.name == name:
            return node.tensor
    return None


def _conv2d(s, out, anchor, target) -> None:
    """ops/conv2d's direct schedule: an f_block x (x_vectors vectors) tile of outputs in
    registers, output rows in parallel."""
    if anchor.info.get("lanes"):
        _conv2d_filter_vectors(s, out, anchor, target)
        return
    (conv,) = anchor.info["stages"]
    lanes = target.vector_lanes(opmath_dtype(out.dtype))
    _, F, _, OW = anchor.info["shape"]
    row_vectors = -(-OW // lanes) if isinstance(OW, int) else 3
    x_vectors = row_vectors if row_vectors <= 4 else 3
    most = filter_block(x_vectors, target)
    f_block = next((b for b in (8, 4, 2, 1) if b <= most and isinstance(F, int) and F % b == 0), 1)
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=f_block)
    xo, xi = s[out].split(x, factor=lanes * x_vectors)
    s[out].reorder(b, y, fo, xo, fi, xi)
    s[out].vectorize(xi)
    rows = s[out].fuse(b, y)
    s[out].parallel(rows)
    s[conv].compute_at(s[out], xo)
    cb, cf, cy, cx = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(cb, cy, rc, ry, rx, cf, cx)
    s[conv].unroll(cf)
    cxo, cxi = s[conv].split(cx, factor=lanes)
    s[conv].unroll(cxo)
    s[conv].vectorize(cxi)


def _conv2d_filter_vectors(s, out, anchor, target) -> None:
    """A direct convolution with vectors along the filters (lower_linalg's packed weights):
    a tile of `x_block` output columns x `f_vectors` vectors of filters accumulated in
    registers over the whole reduction (6 x 2: 12 accumulators, a broadcast and two weight
    vectors in AVX2's 16 registers; 7 x 2 spills, 1.6x slower); the epilogue stores each tile.
    (Under the default `schedule="auto"` static shapes take the first guess instead.)"""
    (conv,) = anchor.info["stages"]
    lanes = anchor.info["lanes"]
    _, F, _, OW = anchor.info["shape"]
    f_vectors = 2 if F % (2 * lanes) == 0 else 1
    x_block = _conv_x_block(OW, 6 if f_vectors == 2 else 12)
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=lanes * f_vectors)
    fio, fii = s[out].split(fi, factor=lanes)
    xo, xi = s[out].split(x, factor=x_block)
    s[out].reorder(b, fo, y, xo, xi, fio, fii)
    s[out].unroll(fio)
    s[out].vectorize(fii)
    rows = s[out].fuse(b, fo, y)
    s[out].parallel(rows)
    s[conv].compute_at(s[out], xo)
    cb, cf, cy, cx, cl = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(cb, cy, rc, ry, rx, cx, cf, cl)
    s[conv].unroll(cx)
    s[conv].unroll(cf)
    s[conv].vectorize(cl)


def _conv_x_block(width, most: int) -> int:
    """Output columns per tile: at most `most` (the accumulators fill the vector registers),
    a divisor of the row where one is near that (no partial tile), else `most - 1`."""
    if not isinstance(width, int):
        return most - 1
    if width <= most:
        return width
    for block in range(most, most // 2, -1):
        if width % block == 0:
            return block
    return most - 1


def _rows(s, out, anchor, target) -> None:
    """Softmax, log-softmax, layer norm: a row per parallel task, its statistics computed at
    the row (ops/softmax's: each row reduction in a few vector accumulators, combined at the
    end; the row's element-wise values, softmax's exps, a line or two per vector step), the
    epilogue vectorized along it."""
    from tensorforge.ops.reduction_helpers import line_step, vectorized_row_reduction

    lanes = target.vector_lanes(opmath_dtype(out.dtype))
    *rows, j = s[out].op.axis
    _, ji = s[out].split(j, factor=lanes)
    s[out].vectorize(ji)
    if not rows:
        return
    row = s[out].fuse(*rows) if len(rows) > 1 else rows[0]
    if _worth_threads(out):
        s[out].parallel(row)
    m = getattr(out.shape[-1], "value", None)
    for stage in reversed(anchor.info["stages"]):
        reduce = stage.op.reduce_axis
        if not reduce:  # a row of element-wise values (softmax's exps)
            s[stage].compute_at(s[out], row)
            if isinstance(m, int) and m % lanes == 0:
                line_step(s[stage], s[stage].op.axis[-1], lanes, stage.dtype, lines=2)
            else:
                _, sj = s[stage].split(s[stage].op.axis[-1], factor=lanes)
                s[stage].vectorize(sj)
            continue
        accumulators = _row_accumulators(m, lanes)
        if len(reduce) == 1 and accumulators and dt.is_float(stage.dtype):
            vectorized_row_reduction(s, stage, s[out], row, lanes, accumulators)
        else:
            s[stage].compute_at(s[out], row)


def _whole_vectors(m, lanes: int) -> bool:
    """Whether a row of `m` elements is whole vectors of `lanes` (no tail)."""
    return isinstance(m, int) and m % lanes == 0


def _row_accumulators(m, lanes: int) -> int:
    """Vector accumulators of a row reduction over `m` elements: as many as 4 whose lanes
    divide the row where some do; else (a tail, or a size known only at run time) as many as
    the row fills, the last step's lanes past the row masked off (they keep the identity);
    0 for rows shorter than a vector (the reduction stays scalar)."""
    if not isinstance(m, int):
        return 2
    whole = next((a for a in (4, 2, 1) if m % (a * lanes) == 0), 0)
    return whole or min(4, m // lanes)


def _reduction(s, out, anchor, target, vectorize: bool = True) -> None:
    """Reductions and windows: each output element's reduction computed right where the
    epilogue needs it; outputs in parallel chunks. Where the last axis is whole vectors, a
    vector of outputs at a time (the reduction loops outside, the lanes inside)."""
    axes = s[out].op.axis
    if not axes:
        return
    lanes = target.vector_lanes(opmath_dtype(out.dtype)) if dt.is_float(out.dtype) else 1
    last = getattr(out.shape[-1], "value", None)
    stages = anchor.info["stages"]
    if anchor.kind == "window" and isinstance(last, int):
        # a pool's row of 56 outputs: 7 vectors of 8 where 16 lanes do not divide it (the
        # first guess's choice; scalar, a 3 x 3 max pool ran 5x slower)
        lanes = max(
            [w for w in (lanes, lanes // 2, lanes // 4) if w >= 4 and last % w == 0] or [lanes]
        )
    if (
        vectorize
        and lanes > 1
        and isinstance(last, int)
        and last % lanes == 0
        and len(stages) == 1
        and all(len(st.shape) == len(out.shape) for st in stages)
    ):
        *rows, x = axes
        xo, xi = s[out].split(x, factor=lanes)
        s[out].vectorize(xi)
        outer = s[out].fuse(*rows, xo) if rows else xo
        if _worth_threads(out):
            s[out].parallel(outer)
        (stage,) = stages
        s[stage].compute_at(s[out], outer)
        *data, sx = s[stage].op.axis
        s[stage].reorder(*data, *s[stage].op.reduce_axis, sx)
        s[stage].vectorize(sx)
        reduce_axes = s[stage].op.reduce_axis
        window = [r for r in reduce_axes if isinstance(getattr(r.dom.extent, "value", None), int)]
        if anchor.kind == "window" and math.prod(r.dom.extent.value for r in window) <= 16:
            for r in window:  # unrolled: the positions that never reach the padding fold it
                s[stage].unroll(r)
        return
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    chunk, inner = s[out].split(fused, factor=64)
    if _worth_threads(out) or len(anchor.info["stages"][0].op.reduce_axis) > 1:
        s[out].parallel(chunk)
    for stage in reversed(anchor.info["stages"]):
        s[stage].compute_at(s[out], inner)
