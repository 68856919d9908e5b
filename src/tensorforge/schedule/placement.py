"""Placement, judged on the finished schedule at lowering: is each `compute_at` legal, and which
memory scope does each stage get. Both only read the schedule; scopes come back as a map.

Legality waits for the finished schedule because a legal schedule may pass through illegal
states: TVM's GPU conv2d attaches a shared cache at a stage before the local cache that reads
it is attached there, and TOPI's softmax computes a producer at a stage that consumes it only
through another stage computed inside it.
"""

from __future__ import annotations

from tensorforge.errors import ScheduleError
from tensorforge.schedule.bounds import enclosing_thread_tags
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage


def check_placement(sch: Schedule) -> None:
    """Every stage computed at a loop sits at a leaf of a stage that consumes it, in no cycle."""
    for stage in sch.stages:
        if stage.attach_type != "scope":
            continue
        parent, axis = stage.attach_stage, stage.attach_ivar
        where = f"'{stage.name}' is computed at '{axis.name}' of '{parent.name}'"
        _check_no_cycle(stage)
        if parent.attach_type == "inline":
            raise ScheduleError(
                f"compute_at: '{stage.name}' is computed at '{parent.name}', which is inlined"
            )
        if axis not in parent.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at: '{stage.name}' is computed at '{axis.name}', which is no longer a "
                f"leaf axis of '{parent.name}' (it was split or fused afterwards); leaf axes "
                f"are: {parent._leaf_names()}"
            )
        if not sch.consumes(parent, stage):
            consumers = ", ".join(c.name for c in sch.consumers_of(stage)) or "nothing"
            raise ScheduleError(
                f"compute_at: {where}, but '{parent.name}' does not consume '{stage.name}' "
                f"(directly, or through stages computed inside it); '{stage.name}' is read by: "
                f"{consumers}"
            )


def _check_no_cycle(stage: Stage) -> None:
    seen: list[Stage] = []
    current: Stage | None = stage
    while current is not None and current.attach_type == "scope":
        if current in seen:
            names = " -> ".join(s.name for s in [*seen[seen.index(current) :], current])
            raise ScheduleError(f"compute_at: stages are computed inside each other ({names})")
        seen.append(current)
        current = current.attach_stage


def infer_scopes(sch: Schedule) -> dict[int, str]:
    """The memory scope of every stage, keyed by id(stage).

    A scope set by the user (set_scope, cache_read/cache_write) stays. An intermediate placed
    inside GPU thread loops, with no scope set, is per thread ("local"); inside block loops
    only, per block ("shared"), as TVM does. CPU schedules are unaffected.
    """
    scopes: dict[int, str] = {}
    for stage in sch.stages:
        scope = stage.scope
        if not stage.scope_explicit and not stage.is_output and stage.attach_type == "scope":
            tags = enclosing_thread_tags(stage)
            if any(t.startswith("threadIdx") for t in tags):
                scope = "local"
            elif any(t.startswith("blockIdx") for t in tags):
                scope = "shared"
        scopes[id(stage)] = scope
    return scopes
