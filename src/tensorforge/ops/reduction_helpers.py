"""Shared scheduling idiom: a row reduction vectorized across `lanes` partial results."""

from __future__ import annotations

from tensorforge.schedule.schedule import Schedule
from tensorforge.te.tensor import IterVar, Tensor


def vectorized_row_reduction(s: Schedule, out: Tensor, parent, row: IterVar, lanes: int) -> Tensor:
    """Reduce each row of `out` in `lanes` vector partials (rfactor), computed at `parent`'s `row`.

    The partial stage keeps `lanes` accumulators in one vector register; the final stage combines
    the lanes. Both are computed inside `parent`'s row loop so a row stays in cache.
    """
    (k,) = s[out].op.reduce_axis
    ko, ki = s[out].split(k, factor=lanes)
    partial = s.rfactor(out, ki, factor_axis=len(s[out].op.axis))
    *data, lane = s[partial].op.axis
    (ro,) = s[partial].op.reduce_axis
    s[partial].reorder(*data, ro, lane)
    s[partial].vectorize(lane)
    s[out].compute_at(parent, row)
    s[partial].compute_at(parent, row)
    return partial
