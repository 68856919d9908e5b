"""Layer normalization over the last axis: one pass for sum and sum of squares, then the
scale; the template "builtin/layer_norm" (CPU)."""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.ops.knobs import choose, current_target, target_scope, workload
from tensorforge.ops.reduction_helpers import line_step, vectorized_row_reduction
from tensorforge.target import Target


def layer_norm(n: int, m: int, eps: float = 1e-5, dtype: str = "float32"):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, statistics over each row."""
    x = te.placeholder((n, m), dtype=dtype, name="x")
    gamma = te.placeholder((m,), dtype=dtype, name="gamma")
    beta = te.placeholder((m,), dtype=dtype, name="beta")
    k1 = te.reduce_axis((0, m), name="k1")
    k2 = te.reduce_axis((0, m), name="k2")
    total = te.compute((n,), lambda i: te.sum(x[i, k1], axis=k1), name="total")
    squares = te.compute((n,), lambda i: te.sum(x[i, k2] * x[i, k2], axis=k2), name="squares")
    inv_m = 1.0 / m

    def normalize(i, j):
        mean = total[i] * inv_m
        var = squares[i] * inv_m - mean * mean
        return (x[i, j] - mean) * te.rsqrt(var + eps) * gamma[j] + beta[j]

    y = te.compute((n, m), normalize, name="y")
    return x, gamma, beta, y


@tune.template("builtin/layer_norm")
def layer_norm_template(n: int, m: int, dtype: str = "float32", parallel: bool = True):
    """Layer norm on the current CPU target; the default config is `schedule_layer_norm`'s."""
    return _schedule(n, m, dtype, current_target(), parallel, tune.get_config())


def schedule_layer_norm(
    n: int, m: int, dtype: str = "float32", target: Target | None = None, parallel: bool = True
):
    """The default layer-norm schedule: template "builtin/layer_norm" called plainly.
    Returns (schedule, [x, gamma, beta, y])."""
    with target_scope(target):
        return layer_norm_template(*workload((n, m, dtype), parallel))


def _schedule(n: int, m: int, dtype: str, target: Target, parallel: bool, cfg):
    """Rows in parallel; per row the two statistics as vectorized reductions, then the scale in
    line-sized vectors with the next row fetched ahead. Knobs: vector accumulators of the
    reductions, cache lines per step, prefetching."""
    lanes = target.vector_lanes(dtype)
    accumulators = choose(cfg, "accumulators", 4, (1, 2, 8))
    lines = choose(cfg, "lines", 1, (2, 4))
    prefetch = choose(cfg, "prefetch", True, (False,))
    x, gamma, beta, y = layer_norm(n, m, dtype=dtype)
    total, squares = [t for t in y.op.input_tensors if t.op.name in ("total", "squares")]
    s = te.create_schedule(y.op)
    i, j = s[y].op.axis
    line, step = line_step(s[y], j, lanes, dtype, lines)
    if prefetch:
        s[y].prefetch(x, line, -(-m // step))  # the next row, once per cache line (see softmax)
    if parallel:
        s[y].parallel(i)
    vectorized_row_reduction(s, total, s[y], i, lanes, accumulators)
    vectorized_row_reduction(s, squares, s[y], i, lanes, accumulators)
    return s, [x, gamma, beta, y]
