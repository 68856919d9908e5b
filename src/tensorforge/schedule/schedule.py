"""Schedule: the stages of every operation the outputs depend on."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.schedule.stage import Stage, as_stage_key
from tensorforge.te.graph import topological_ops
from tensorforge.te.tensor import Operation, Tensor


class Schedule:
    """Maps each operation to its Stage; `s[T]` is the stage computing tensor T."""

    def __init__(self, outputs: list[Operation]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._stage_of: dict[int, Stage] = {}
        for op in topological_ops(self.outputs):
            self._add_stage(op)
        for op in self.outputs:
            self[op].is_output = True

    def _add_stage(self, op: Operation, position: int | None = None) -> Stage:
        stage = Stage(op, self)
        self._stage_of[id(op)] = stage
        if position is None:
            self.stages.append(stage)
        else:
            self.stages.insert(position, stage)
        return stage

    def __getitem__(self, key: Any) -> Stage:
        op = as_stage_key(key)
        try:
            return self._stage_of[id(op)]
        except KeyError:
            names = ", ".join(s.name for s in self.stages)
            raise ScheduleError(
                f"'{op.name}' is not part of this schedule (its stages: {names})"
            ) from None

    def __contains__(self, key: Any) -> bool:
        return id(as_stage_key(key)) in self._stage_of

    # -- graph queries ----------------------------------------------------------------------------
    def readers_of(self, stage: Stage) -> list[Stage]:
        """Stages whose expressions read one of `stage`'s outputs directly."""
        return [s for s in self.stages if any(t.op is stage.op for t in s.op.input_tensors)]

    def consumers_of(self, stage: Stage) -> list[Stage]:
        """Stages that read `stage`, looking through inlined stages to the ones they inline into."""
        out: list[Stage] = []
        for reader in self.readers_of(stage):
            targets = self.consumers_of(reader) if reader.attach_type == "inline" else [reader]
            out.extend(t for t in targets if t not in out)
        return out

    def consumes(self, parent: Stage, stage: Stage) -> bool:
        """Does `parent`, or a stage computed (transitively) inside it, consume `stage`?"""
        return any(self.is_inside(c, parent) for c in self.consumers_of(stage))

    def depends_on(self, stage: Stage, producer: Stage) -> bool:
        """Does `stage` read `producer`'s outputs, directly or through any chain of operations?
        (What no placement can change: a stage computed at `stage` must pass this.)"""
        pending, seen = list(stage.op.input_tensors), set()
        while pending:
            op = pending.pop().op
            if op is producer.op:
                return True
            if id(op) not in seen:
                seen.add(id(op))
                pending += op.input_tensors
        return False

    def is_inside(self, stage: Stage, parent: Stage) -> bool:
        """Is `stage` `parent` itself, or attached (transitively) inside `parent`'s loops?"""
        seen = set()
        while stage is not None and id(stage) not in seen:
            if stage is parent:
                return True
            seen.add(id(stage))
            stage = stage.attach_stage
        return False

    # -- primitives on tensors (defined in their own modules) -------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers: Any) -> Tensor:
        from tensorforge.schedule.cache import cache_read

        return cache_read(self, tensor, scope, readers)

    def cache_write(self, tensor: Any, scope: str) -> Any:
        from tensorforge.schedule.cache import cache_write

        return cache_write(self, tensor, scope)

    def rfactor(self, tensor: Tensor, axis: Any, factor_axis: int = 0) -> Any:
        from tensorforge.schedule.rfactor import rfactor

        return rfactor(self, tensor, axis, factor_axis)

    def __repr__(self) -> str:
        return f"Schedule({', '.join(s.name for s in self.stages)})"


def create_schedule(ops: Any) -> Schedule:
    """A Schedule for `ops` (an Operation, a Tensor, or a list of them) and everything they read."""
    items: Iterable[Any] = ops if isinstance(ops, (list, tuple)) else [ops]
    outputs: list[Operation] = []
    for item in items:
        op = as_stage_key(item)
        if op not in outputs:
            outputs.append(op)
    if not outputs:
        raise ScheduleError("create_schedule: give at least one output operation")
    return Schedule(outputs)
