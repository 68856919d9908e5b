"""Shared scheduling idioms for row-wise operators: vectorized row reductions, line-sized steps."""

from __future__ import annotations

from tensorforge.schedule.schedule import Schedule
from tensorforge.te.dtype import bits_of
from tensorforge.te.tensor import IterVar, Tensor

CACHE_LINE_BYTES = 64


def vectorized_row_reduction(
    s: Schedule, out: Tensor, parent, row: IterVar, lanes: int, accumulators: int = 4
) -> Tensor:
    """Reduce each row of `out` in `accumulators x lanes` partial results (rfactor), computed at
    `parent`'s `row`.

    The partial stage keeps `accumulators` independent vector registers of `lanes` partials: one
    accumulator would wait a whole add (or compare) latency per vector, several keep the vector
    units busy. The final stage combines the partials. Both are computed inside `parent`'s row
    loop so a row stays in cache.
    """
    (k,) = s[out].op.reduce_axis
    ko, ki = s[out].split(k, factor=lanes * accumulators)
    partial = s.rfactor(out, ki, factor_axis=len(s[out].op.axis))
    *data, lane = s[partial].op.axis
    (ro,) = s[partial].op.reduce_axis
    acc, vec = s[partial].split(lane, factor=lanes)
    s[partial].reorder(*data, ro, acc, vec)
    s[partial].unroll(acc)
    s[partial].vectorize(vec)
    s[out].compute_at(parent, row)
    s[partial].compute_at(parent, row)
    return partial


def line_step(stage, axis: IterVar, lanes: int, dtype: str, lines: int = 1) -> tuple[IterVar, int]:
    """Walk `axis` `lines` cache lines (at least a vector) per iteration, as one wide vector, so
    a prefetch placed at the returned loop is issued once per line. Returns that loop and how
    many elements it steps.

    NOTE: one wide vector rather than native vectors unrolled: LLVM splits it into native
    registers with the pieces' instructions interleaved, while unrolled copies of a loop body
    holding exp's range branch stay one after another (the sigmoid chain ran 2x slower so).
    """
    step = max(lanes, lines * CACHE_LINE_BYTES * 8 // bits_of(dtype))
    outer, inner = stage.split(axis, factor=step)
    stage.vectorize(inner)
    return outer, step
