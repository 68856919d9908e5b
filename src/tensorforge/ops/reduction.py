"""Row reductions (sum, max, min over the last axis): the computation, a vectorized CPU schedule
and a cross-thread GPU one, and the template "builtin/row_reduce"."""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.errors import ArgumentError
from tensorforge.ops.knobs import choose, current_target, is_gpu, target_scope, workload
from tensorforge.target import Target

REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}


def row_reduce(n: int, m: int, kind: str = "sum", dtype: str = "float32"):
    """y[i] = kind_j x[i, j] for kind in sum, max, min. Returns (x, y)."""
    if kind not in REDUCERS:
        raise ArgumentError(f"row_reduce: kind must be one of {', '.join(REDUCERS)}, got {kind!r}")
    x = te.placeholder((n, m), dtype=dtype, name="x")
    k = te.reduce_axis((0, m), name="k")
    y = te.compute((n,), lambda i: REDUCERS[kind](x[i, k], axis=k), name=f"row_{kind}")
    return x, y


@tune.template("builtin/row_reduce")
def row_reduce_template(
    n: int, m: int, kind: str = "sum", dtype: str = "float32", parallel: bool = True
):
    """A row reduction on the current target; the default config is `schedule_row_reduce`'s."""
    target = current_target()
    x, y = row_reduce(n, m, kind, dtype)
    cfg = tune.get_config()
    if is_gpu(target):
        return _schedule_gpu(x, y, cfg), [x, y]
    return _schedule_cpu(x, y, target, parallel, cfg), [x, y]


def schedule_row_reduce(
    n: int,
    m: int,
    kind: str = "sum",
    dtype: str = "float32",
    target: Target | None = None,
    parallel: bool = True,
):
    """The default row-reduction schedule for `target`: template "builtin/row_reduce" called
    plainly. Returns (schedule, [x, y])."""
    with target_scope(target):
        return row_reduce_template(*workload((n, m, kind, dtype), parallel))


def _schedule_cpu(x, y, target: Target, parallel: bool, cfg):
    """Rows in parallel; each row reduced into `accumulators` independent vector registers
    (an rfactor over lanes), then across them. Knob: the accumulators (add latency x ports)."""
    lanes = target.vector_lanes(y.dtype)
    accumulators = choose(cfg, "accumulators", 4, (1, 2, 8))
    s = te.create_schedule(y.op)
    (k,) = s[y].op.reduce_axis
    _, ki = s[y].split(k, factor=lanes * accumulators)
    partial = s.rfactor(y, ki, factor_axis=1)
    (i,) = s[y].op.axis
    if parallel:
        s[y].parallel(i)
    s[partial].compute_at(s[y], i)
    _, lane = s[partial].op.axis
    (ro,) = s[partial].op.reduce_axis
    acc, vec = s[partial].split(lane, factor=lanes)
    s[partial].reorder(ro, acc, vec)
    s[partial].unroll(acc)
    s[partial].vectorize(vec)
    return s


def _schedule_gpu(x, y, cfg):
    """One block per row; its threads reduce strided parts, then combine across the block
    (warp shuffles). Knob: threads per block."""
    threads = choose(cfg, "threads", 256, (32, 64, 128, 512, 1024))
    s = te.create_schedule(y.op)
    (i,) = s[y].op.axis
    (k,) = s[y].op.reduce_axis
    _, ki = s[y].split(k, factor=threads)
    s[y].bind(i, te.thread_axis("blockIdx.x"))
    s[y].bind(ki, te.thread_axis("threadIdx.x"))
    return s
