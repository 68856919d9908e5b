"""Row softmax: max, exp, sum and scale per row, all inside one parallel row loop; the
template "builtin/softmax" (CPU knobs; on a GPU, ops/cuda.py's one-block-per-row kernel)."""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.ops.knobs import choose, current_target, is_gpu, target_scope, workload
from tensorforge.ops.reduction_helpers import line_step, vectorized_row_reduction
from tensorforge.target import Target


def softmax(n: int, m: int, dtype: str = "float32"):
    """y[i, j] = exp(x[i, j] - max_j x[i, :]) / sum_j exp(x[i, j] - max)."""
    x = te.placeholder((n, m), dtype=dtype, name="x")
    k1 = te.reduce_axis((0, m), name="k1")
    row_max = te.compute((n,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(x[i, j] - row_max[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    row_sum = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    # one reciprocal per row, then a multiply per element (a vector divide is several times slower)
    y = te.compute((n, m), lambda i, j: e[i, j] * (1.0 / row_sum[i]), name="y")
    return x, y


@tune.template("builtin/softmax")
def softmax_template(n: int, m: int, dtype: str = "float32", parallel: bool = True):
    """Row softmax on the current target; the default config is `schedule_softmax`'s."""
    target = current_target()
    cfg = tune.get_config()
    if is_gpu(target):
        from tensorforge.ops.cuda import schedule_softmax_cuda

        threads = choose(cfg, "threads", 256, (64, 128, 512, 1024))
        return schedule_softmax_cuda(n, m, dtype, threads, choose(cfg, "vector", 4, (1, 2)))
    return _schedule_cpu(n, m, dtype, target, parallel, cfg)


def schedule_softmax(
    n: int, m: int, dtype: str = "float32", target: Target | None = None, parallel: bool = True
):
    """The default softmax schedule for `target` (default: the current one, else this CPU):
    template "builtin/softmax" called plainly. Returns (schedule, [x, y])."""
    with target_scope(target):
        return softmax_template(*workload((n, m, dtype), parallel))


def _schedule_cpu(n: int, m: int, dtype: str, target: Target, parallel: bool, cfg):
    """Per row: a vectorized max, exp into a row buffer, a vectorized sum, a vectorized scale.

    Knobs: vector accumulators of the row reductions, cache lines per exp step, prefetching."""
    lanes = target.vector_lanes(dtype)
    accumulators = choose(cfg, "accumulators", 4, (1, 2, 8))
    exp_lines = choose(cfg, "exp_lines", 2, (1, 4))
    prefetch = choose(cfg, "prefetch", True, (False,))
    x, y = softmax(n, m, dtype)
    e = y.op.input_tensors[0]
    row_sum = y.op.input_tensors[1]
    row_max = e.op.input_tensors[1]
    s = te.create_schedule(y.op)
    i, j = s[y].op.axis
    jo, ji = s[y].split(j, factor=lanes)
    s[y].vectorize(ji)
    if parallel:
        s[y].parallel(i)
    vectorized_row_reduction(s, row_sum, s[y], i, lanes, accumulators)
    s[e].compute_at(s[y], i)  # one row of exp values, read by the sum and the scale
    _, ej = s[e].op.axis
    # two lines per step: the exps of two lines' vectors interleave (a long dependency chain each)
    line, step = line_step(s[e], ej, lanes, dtype, lines=exp_lines)
    # while a row's exps are computed, fetch the next row line by line: the max pass then
    # finds it in cache, and the memory traffic overlaps the arithmetic (measured on 4096 x 4096:
    # 1.4x faster than no prefetch; two rows ahead is no faster and needs more cache)
    if prefetch:
        s[e].prefetch(x, line, -(-m // step))
    # and fetch this row's output lines writable meanwhile: the scaling pass's stores then hit
    # cache instead of stalling on each line's read-for-ownership (4096 x 4096, AVX-512, one
    # thread: 2.9 -> 2.1 us a row)
    if prefetch:
        s[e].prefetch(y, line, 0)
    vectorized_row_reduction(s, row_max, s[y], i, lanes, accumulators)
    return s, [x, y]
