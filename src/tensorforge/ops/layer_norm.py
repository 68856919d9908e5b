"""Layer normalization over the last axis: one pass for sum and sum of squares, then the scale."""

from __future__ import annotations

from tensorforge import te
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


def schedule_layer_norm(
    n: int, m: int, dtype: str = "float32", target: Target | None = None, parallel: bool = True
):
    target = target or Target("llvm")
    lanes = target.vector_lanes(dtype)
    x, gamma, beta, y = layer_norm(n, m, dtype=dtype)
    total, squares = [t for t in y.op.input_tensors if t.op.name in ("total", "squares")]
    s = te.create_schedule(y.op)
    i, j = s[y].op.axis
    line, step = line_step(s[y], j, lanes, dtype)
    s[y].prefetch(x, line, -(-m // step))  # the next row, once per cache line (see softmax)
    if parallel:
        s[y].parallel(i)
    vectorized_row_reduction(s, total, s[y], i, lanes)
    vectorized_row_reduction(s, squares, s[y], i, lanes)
    return s, [x, gamma, beta, y]
