"""A schedule for each kernel the graph layer makes: the anchor's own (matmul, conv2d, row
operators, reductions, windows) with the element-wise epilogue as the stage it is computed in,
or a rule-based one for element-wise kernels (CPU: parallel chunks, vectors with tails; CUDA:
blocks of threads, a few contiguous elements each).

The kernel's output stage is the epilogue; the anchor's reduction stages are computed at its
loops (`compute_at`), so the epilogue reads each result while it is in registers or cache.
"""

from __future__ import annotations

import dataclasses
import math

from tensorforge import te
from tensorforge.graph import schedules_cuda
from tensorforge.graph.schedules_cpu_dot import schedule_cpu_dot
from tensorforge.graph.schedules_cpu_products import (
    conv_keeps_rules,
    schedule_conv2d,
    schedule_matmul,
    worth_threads,
)
from tensorforge.graph.values import opmath_dtype
from tensorforge.runtime.native_call import num_threads
from tensorforge.te import dtype as dt

CHUNK = 4096  # elements each parallel iteration of an element-wise kernel walks

SOURCES = {
    None: "rule-based element-wise",
    "matmul": "matmul: register-tiled panels (ops/matmul schedule)",
    "conv2d": "conv2d: direct, register-tiled (ops/conv2d schedule)",
    "softmax": "row operator: one row per task (ops/softmax schedule)",
    "layer_norm": "row operator: one row per task (ops/layer_norm schedule)",
    "reduce": "reduction: computed at its epilogue's elements",
    "window": "window reduction: computed at its epilogue's elements",
    "scan": "scan's blocked sums: computed at their epilogue's elements",
    "extern": "an ir_builder program (graph/extern_kernels.py): its own loops, as written",
}


# anchors whose schedule by hand (the ops library's) the first guess does not beat: "auto" keeps
# it. Measured per kernel (1 thread, rules / first guess): matmul 0.63-1.19 (small ones lose);
# direct conv2d + epilogue 1.7-2.1, softmax 1.5-3.5, layer norm 1.7-6.5, element-wise 1.2-7.6;
# cumsum's block sums and carries (64 x 4099 along rows: 78 and 15 us, against 14.7 and 11.0 ms)
HAND_SCHEDULED = ("matmul", "scan")


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
    if kind == "conv2d" and conv_keeps_rules(spec.anchor.info):
        return True
    if kind is None:
        return _transposed_axes(spec.out) is not None or _few_row_tasks(spec.out)
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
    if spec.anchor is not None and spec.anchor.kind == "extern":  # scheduled as it was written
        return (s or te.create_schedule(out.op)), SOURCES["extern"]
    if schedule != "rules" and not simple and s is None:
        guessed = _first_guess(spec, target, schedule, size_hints or {})
        if guessed is not None:
            return guessed, FIRST_GUESS
    if s is None:
        s = te.create_schedule(out.op)
    anchor = _read_stages(spec.anchor, s)
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
        if _few_row_tasks(out):
            _elementwise_rows_in_chunks(s, out, target)
            return s, CHUNKED_ROWS_SOURCE
        _elementwise(s, out, target)
    elif kind == "matmul" and "cpu_dot" in anchor.info:
        return s, schedule_cpu_dot(s, out, anchor, target)
    elif kind == "matmul":
        schedule_matmul(s, out, anchor, target)
    elif kind == "conv2d":
        schedule_conv2d(s, out, anchor, target)
    elif kind in ("softmax", "layer_norm"):
        _rows(s, out, anchor, target)
    else:
        _reduction(s, out, anchor, target)
    return s, SOURCES[kind]


def _read_stages(anchor, s):
    """The anchor less the stages its kernel does not read (var_mean's mean alone reads no sum
    of squares): a rule places only stages of the schedule."""
    if anchor is None or all(stage in s for stage in anchor.info["stages"]):
        return anchor
    stages = [stage for stage in anchor.info["stages"] if stage in s]
    return dataclasses.replace(anchor, info={**anchor.info, "stages": stages})


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
    if not isinstance(body.tensor.op, PlaceholderOp) or not body.indices:  # (a 0-d read)
        return None
    used = {n for n in walk(body.indices[-1]) if isinstance(n, Var)}
    if axes[-1].var in used or axes[-2].var not in used:
        return None
    return len(axes) - 2, len(axes) - 1


def _elementwise(s, out, target) -> None:
    axes = s[out].op.axis
    if not axes:
        return
    width = target.vector_lanes(opmath_dtype(out.dtype) if out.dtype != "bool" else "int8") * 2
    sizes = [getattr(e, "value", None) for e in out.shape]
    if len(axes) > 1 and not all(isinstance(v, int) for v in sizes):
        last = sizes[-1]
        if not isinstance(last, int) or last >= width // 2:  # (short rows: fused, see below)
            _elementwise_rows(s, out, axes, width // 2)
            return
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    chunk, step = s[out].split(fused, factor=CHUNK)
    _, vector = s[out].split(step, factor=width)
    s[out].vectorize(vector)
    if worth_threads(out):
        s[out].parallel(chunk)


def _elementwise_rows(s, out, axes, width: int) -> None:
    """Sizes known at run time: vectors along the last axis, the rows (the other axes fused)
    in parallel, the partial vector of each row peeled. Fused whole, each lane's index was
    divided by run-time extents (no strength reduction): a convolution's padded input of 64 x
    58 x 58 at 1 thread took 2.7 ms against eager's 0.14, its 3 x 3 conv 4.9 ms against 2.6.
    Rows shorter than a vector stay fused (a vector spans several rows there)."""
    rows = s[out].fuse(*axes[:-1]) if len(axes) > 2 else axes[0]
    _, vector = s[out].split(axes[-1], factor=width, tail="peel")
    s[out].vectorize(vector)
    if worth_threads(out):
        s[out].parallel(rows)


CHUNKED_ROWS_SOURCE = "element-wise: rows in parallel chunks"
TASKS_PER_THREAD = 4  # parallel tasks a thread gets at least: a late one's share of the work
CHUNKED_ROWS_MIN_ELEMENTS = 1 << 16  # below, one thread (eager's grain is 32768 elements)


def _few_row_tasks(out) -> bool:
    """Whether an element-wise kernel worth the threads, run on more than one, has fewer
    rows (the product of all but its last axis) than TASKS_PER_THREAD tasks a thread: the first
    guess runs the rows in parallel and leaves a vector (a row of 4M, the only one) to a single
    thread, or 3 rows of 1.4M to 2 threads, one running two. Its chunks of rows then."""
    threads = num_threads()
    sizes = [getattr(e, "value", None) for e in out.shape]
    if threads == 1 or not sizes or any(not isinstance(v, int) for v in sizes):
        return False  # (run-time sizes: the rules' fused chunks already)
    if math.prod(sizes) < CHUNKED_ROWS_MIN_ELEMENTS:
        return False
    return math.prod(sizes[:-1]) < TASKS_PER_THREAD * threads and sizes[-1] >= 2 * CHUNK


def _elementwise_rows_in_chunks(s, out, target) -> None:
    """Each row in chunks of CHUNK elements, every chunk of every row a parallel task,
    vectors along the row (the rows are not fused with the chunks, so a vector never spans two
    rows and a broadcast read along the row stays a vector load)."""
    *rows, last = s[out].op.axis
    width = target.vector_lanes(opmath_dtype(out.dtype) if out.dtype != "bool" else "int8") * 2
    chunk, step = s[out].split(last, factor=CHUNK)
    _, vector = s[out].split(step, factor=width)
    s[out].vectorize(vector)
    s[out].parallel(s[out].fuse(*rows, chunk) if rows else chunk)


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
    if worth_threads(out):
        s[out].parallel(tasks)


def _tile_split(stage, axis, extent):
    """`axis` split in transpose tiles; of a run-time extent, with the last partial tile peeled.
    (A static kernel's calls are recorded as a trace, whose split has no tail mode.)"""
    if isinstance(getattr(extent, "value", None), int):
        return stage.split(axis, factor=TRANSPOSE_TILE)
    return stage.split(axis, factor=TRANSPOSE_TILE, tail="peel")


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
    if worth_threads(out):
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
    tail = "auto"
    if anchor.kind == "scan" and isinstance(last, int) and last > lanes:
        # a scan's row of 4099: vectors and a peeled scalar tail (scalar throughout, 64 x 4099
        # took 10x eager's time); integer scans (cummax's indices) in vectors too
        lanes = target.vector_lanes(out.dtype) if not dt.is_float(out.dtype) else lanes
        tail = "peel" if last % lanes else tail
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
        and (last % lanes == 0 or tail == "peel")
        and len(stages) == 1
        and all(len(st.shape) == len(out.shape) for st in stages)
    ):
        *rows, x = axes
        xo, xi = s[out].split(x, factor=lanes, tail=tail)
        s[out].vectorize(xi)
        outer = xo
        if tail == "peel" and rows:  # (a tail is peeled off a leaf loop, not a fused one:
            # rows fused with the vectors guarded every lane of every vector, 64 x 4099 2.2x
            # the time of 64 x 4096)
            row = s[out].fuse(*rows) if len(rows) > 1 else rows[0]
            if worth_threads(out):
                s[out].parallel(row)
        else:
            outer = s[out].fuse(*rows, xo) if rows else xo
            if worth_threads(out):
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
    if worth_threads(out) or len(anchor.info["stages"][0].op.reduce_axis) > 1:
        s[out].parallel(chunk)
    for stage in reversed(anchor.info["stages"]):
        s[stage].compute_at(s[out], inner)
