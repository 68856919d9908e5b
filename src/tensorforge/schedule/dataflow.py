"""Rewire the operation graph inside a schedule when a primitive replaces a tensor."""

from __future__ import annotations

from typing import Any

from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import TensorRead
from tensorforge.te.tensor import ComputeOp, Operation, Tensor
from tensorforge.te.visit import rewrite


def rewrite_reads(op: ComputeOp, mapping: dict[Tensor, Tensor]) -> ComputeOp:
    """A copy of `op` whose reads of mapping's keys read the mapped tensors (same iter vars)."""

    def final(t: Tensor) -> Tensor:  # follow chains: a replaced op may be replaced again
        while t in mapping and mapping[t] != t:
            t = mapping[t]
        return t

    def rule(n: Any) -> Any:
        if isinstance(n, TensorRead) and n.tensor in mapping:
            return TensorRead(final(n.tensor), n.indices)
        return None

    body = tuple(rewrite(b, rule) for b in op.body)
    return ComputeOp(op.name, op.tag, op.attrs, op.axis, op.reduce_axis, body)


def replace_op(sch: Schedule, stage: Stage, new_op: Operation) -> dict[Tensor, Tensor]:
    """Make `stage` compute `new_op`; the old op still finds the stage. Returns old -> new outputs."""
    old = stage.op
    stage.op = new_op
    sch._stage_of[id(new_op)] = stage
    sch.outputs = [new_op if o is old else o for o in sch.outputs]
    return {old.output(i): new_op.output(i) for i in range(old.num_outputs)}


def replace_dataflow(sch: Schedule, mapping: dict[Tensor, Tensor]) -> None:
    """Make every stage read the mapped tensors instead of the keys, passing changes downstream."""
    mapping = dict(mapping)
    for stage in list(sch.stages):  # topological order: a rewritten producer precedes its readers
        op = stage.op
        if isinstance(op, ComputeOp) and any(t in mapping for t in op.input_tensors):
            mapping.update(replace_op(sch, stage, rewrite_reads(op, mapping)))


def resolve(sch: Schedule, t: Tensor) -> Tensor:
    """The tensor the schedule currently computes for a user's (possibly replaced) tensor."""
    if t.op in sch:
        return sch[t.op].op.output(t.value_index)
    return t
