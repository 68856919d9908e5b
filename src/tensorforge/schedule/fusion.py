"""Automatic operator fusion (auto_inline): inline every injective stage into its consumers.

Named `fusion`, not `auto_inline`: a submodule named like the package's function would replace
that function on `tensorforge.schedule` the moment it is imported.
"""

from __future__ import annotations

from tensorforge.schedule.schedule import Schedule
from tensorforge.te.tensor import ComputeOp


def is_injective(stage) -> bool:
    """Element-wise, broadcast or reshape-like: one output element from a few input elements."""
    op = stage.op
    return isinstance(op, ComputeOp) and not op.is_reduction and op.num_outputs == 1


def auto_inline(s: Schedule) -> Schedule:
    """Inline each injective, non-output stage that nothing is attached to."""
    for stage in s.stages:
        if (
            stage.is_output
            or stage.attach_type != "root"
            or not is_injective(stage)
            or stage.relations
        ):
            continue
        if stage.scope != "global" or any(x.attach_stage is stage for x in s.stages):
            continue  # a cache the user placed on purpose, or a stage others are computed in
        if any(not isinstance(r.op, ComputeOp) for r in s.readers_of(stage)):
            continue  # read whole by a te.extern or te.scan stage
        stage.compute_inline()
    return s
