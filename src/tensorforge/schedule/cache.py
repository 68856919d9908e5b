"""cache_read and cache_write: stage a tensor through another memory scope."""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.schedule.dataflow import replace_dataflow, replace_op, rewrite_reads
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import SCOPES, Stage
from tensorforge.te.expr import Reduce
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import ComputeOp, IterVar, Range, Tensor


def _check_scope(primitive: str, name: str, scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(
            f"{primitive} of '{name}': unknown scope {scope!r}; expected one of {', '.join(SCOPES)}"
        )


def _current(sch: Schedule, t: Tensor, primitive: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise ScheduleError(f"{primitive}: expected a Tensor, got {t!r}")
    return sch[t].op.output(t.value_index)


def cache_read(sch: Schedule, tensor: Tensor, scope: str, readers: Any) -> Tensor:
    """A new stage copying `tensor` into `scope`; `readers` read the copy instead."""
    tensor = _current(sch, tensor, "cache_read")
    _check_scope("cache_read", tensor.name, scope)
    items = readers if isinstance(readers, (list, tuple)) else [readers]
    if not items:
        raise ScheduleError(f"cache_read of '{tensor.name}': give at least one reader")
    reader_stages: list[Stage] = [sch[r] for r in items]
    for r in reader_stages:
        if tensor not in r.op.input_tensors:
            readers_now = ", ".join(s.name for s in sch.readers_of(sch[tensor])) or "nothing"
            raise ScheduleError(
                f"cache_read: '{r.name}' does not read '{tensor.name}' (it is read by: {readers_now})"
            )
    axis = tuple(IterVar(_fresh(f"ax{d}"), Range.of(e)) for d, e in enumerate(tensor.shape))
    body = (tensor[tuple(iv.var for iv in axis)],)
    cache_op = ComputeOp(f"{tensor.name}.{scope}", "", {}, axis, (), body)
    cache = cache_op.output(0)
    mapping: dict[Tensor, Tensor] = {}
    for r in reader_stages:
        mapping.update(replace_op(sch, r, rewrite_reads(r.op, {tensor: cache})))
    position = min(sch.stages.index(r) for r in reader_stages)
    stage = sch._add_stage(cache_op, position)
    stage.scope = scope
    stage.scope_explicit = True
    replace_dataflow(sch, mapping)
    return cache


def cache_write(sch: Schedule, tensor: Any, scope: str) -> Any:
    """Compute `tensor` into a new stage in `scope`; the tensor's stage becomes a copy-out."""
    tensors = list(tensor) if isinstance(tensor, (list, tuple)) else [tensor]
    first = _current(sch, tensors[0], "cache_write")
    stage = sch[first]
    op = stage.op
    _check_scope("cache_write", first.name, scope)
    if not isinstance(op, ComputeOp):
        raise ScheduleError(
            f"cache_write: '{first.name}' is a placeholder; only computed tensors can be cached"
        )
    if stage.relations or stage.leaf_iter_vars != list(op.axis) + list(op.reduce_axis):
        raise ScheduleError(
            f"cache_write of '{op.name}': call cache_write before splitting or reordering stage '{op.name}'"
        )
    if stage.attach_type == "inline":
        raise ScheduleError(f"cache_write: '{op.name}' is inlined")
    if len(tensors) != op.num_outputs and op.num_outputs > 1:
        raise ScheduleError(
            f"cache_write of '{op.name}': pass all {op.num_outputs} outputs of the op together"
        )
    # the cache computes the original expression over fresh axes
    cache_axis = tuple(IterVar(_fresh(iv.name + ".c"), iv.dom, iv.kind) for iv in op.axis)
    cache_reduce = tuple(IterVar(_fresh(iv.name + ".c"), iv.dom, iv.kind) for iv in op.reduce_axis)
    to_cache = {iv.var: c.var for iv, c in zip(op.axis + op.reduce_axis, cache_axis + cache_reduce)}
    body = []
    for b in op.body:
        if isinstance(b, Reduce):
            b = Reduce(
                b.combiner,
                tuple(substitute(s, to_cache) for s in b.source),
                cache_reduce,
                substitute(b.condition, to_cache),
                b.value_index,
            )
        else:
            b = substitute(b, to_cache)
        body.append(b)
    cache_op = ComputeOp(
        f"{op.name}.{scope}", op.tag, dict(op.attrs), cache_axis, cache_reduce, tuple(body)
    )
    # the original stage now copies the cache out over the original data axes, so `C.op.axis`
    # still names its loops (TVM's GEMM tutorial tiles them right after cache_write)
    out_axis = tuple(op.axis)
    index = tuple(iv.var for iv in out_axis)
    copy_body = tuple(cache_op.output(i)[index] for i in range(op.num_outputs))
    copy_op = ComputeOp(op.name, op.tag, dict(op.attrs), out_axis, (), copy_body)
    position = sch.stages.index(stage)
    cache_stage = sch._add_stage(cache_op, position)
    cache_stage.scope = scope
    cache_stage.scope_explicit = True
    mapping = replace_op(sch, stage, copy_op)
    stage.all_iter_vars = list(out_axis)
    stage.leaf_iter_vars = list(out_axis)
    stage.iter_attrs = {}
    replace_dataflow(sch, mapping)
    outputs = [cache_op.output(i) for i in range(op.num_outputs)]
    return outputs[0] if len(outputs) == 1 else outputs


def _fresh(name: str):
    from tensorforge.te.expr import Var

    return Var(name)
