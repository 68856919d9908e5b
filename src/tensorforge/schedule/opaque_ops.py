"""Lowering of the stages that are not loop nests of their own: te.extern and te.scan.

An extern stage is its calls, or the statement an ir_builder built, with each ExternBuffer
replaced by the buffer of its tensor. A
scan stage is its init stages, then one loop over time holding its body stages (the update
and whatever sits between the state and the update, left at root), each computing the row at
the loop's index. The state placeholder, the init and the update all live in the scan's
buffer (`aliases`), so nothing is copied. to_ir, bounds and loops call in here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.arith.index_dtype import widen
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import AddressOf, ExternBufferView, WholeBuffer
from tensorforge.ir.stmt import BufferStore, Evaluate, For, Stmt, seq
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Expr, Var, const
from tensorforge.te.extern_call import AccessPtr, BufferArg, ExternBuffer, ExternOp
from tensorforge.te.scan_op import ScanOp
from tensorforge.te.tensor import ComputeOp, PlaceholderOp, Tensor
from tensorforge.te.visit import rewrite

OPAQUE = (ExternOp, ScanOp)


def is_computed(stage: Stage) -> bool:
    """Does the stage get bounds and a buffer (a compute not inlined, an extern, a scan)?"""
    return isinstance(stage.op, (ComputeOp, *OPAQUE)) and stage.attach_type != "inline"


def _scans(sch: Schedule) -> list[ScanOp]:
    return [s.op for s in sch.stages if isinstance(s.op, ScanOp)]


def aliases(sch: Schedule) -> dict[Tensor, Tensor]:
    """Tensor -> the scan output whose buffer holds it (states, computed inits, updates)."""
    out: dict[Tensor, Tensor] = {}
    for op in _scans(sch):
        for i in range(op.num_outputs):
            result = op.output(i)
            out[op.state_placeholder[i]] = result
            out[op.update[i]] = result
            if not isinstance(op.init[i].op, PlaceholderOp):
                out[op.init[i]] = result
    return out


def internal_placeholders(sch: Schedule) -> set[int]:
    """ids of the scans' state placeholders (not kernel arguments)."""
    return {id(t.op) for op in _scans(sch) for t in op.state_placeholder}


def _body_stages(sch: Schedule, op: ScanOp) -> list[Stage]:
    """Root stages computed per time step: the updates and the stages between state and update."""
    states = {id(t.op) for t in op.state_placeholder}
    reads_state: set[int] = set()
    for stage in sch.stages:  # topological
        if any(id(t.op) in states or id(t.op) in reads_state for t in stage.op.input_tensors):
            if isinstance(stage.op, ComputeOp):
                reads_state.add(id(stage.op))
    feeds_update: set[int] = {id(t.op) for t in op.update}
    for stage in reversed(sch.stages):
        if id(stage.op) in feeds_update:
            feeds_update.update(id(t.op) for t in stage.op.input_tensors)
    return [
        s
        for s in sch.stages
        if id(s.op) in reads_state
        and (id(s.op) in feeds_update or s.op in {t.op for t in op.update})
        and s.attach_type == "root"
    ]


def _init_stages(sch: Schedule, op: ScanOp) -> list[Stage]:
    return [
        sch[t.op]
        for t in op.init
        if isinstance(t.op, ComputeOp) and t.op in sch and sch[t.op].attach_type == "root"
    ]


def nested_stages(sch: Schedule) -> set[int]:
    """ids of the root stages a scan emits inside its own nest (not at the top level)."""
    return {id(s) for op in _scans(sch) for s in _body_stages(sch, op) + _init_stages(sch, op)}


def root_region(sch: Schedule, stage: Stage) -> list[tuple[Expr, Expr]]:
    """The region a root stage computes: its whole domain, but one row for a scan's body."""
    op = stage.op
    region = [(iv.dom.min, iv.dom.extent) for iv in op.axis]
    for scan in _scans(sch):
        if stage in _body_stages(sch, scan):
            region[0] = (scan.scan_axis.var, const(1, scan.scan_axis.var.dtype))
    return region


def check(sch: Schedule) -> None:
    """Misplaced extern and scan stages, and stages they read that were inlined."""
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, OPAQUE) and stage.attach_type != "root":
            what = "te.extern" if isinstance(op, ExternOp) else "te.scan"
            raise ScheduleError(
                f"{stage.attach_type}: '{stage.name}' is a {what} stage; it runs at root "
                f"(compute_at and compute_inline apply to te.compute stages)"
            )
        if not isinstance(op, OPAQUE):
            continue
        for t in op.input_tensors:
            if t.op in sch and sch[t.op].attach_type == "inline":
                raise ScheduleError(
                    f"compute_inline: '{t.name}' is inlined, but '{stage.name}' "
                    f"({type(op).__name__}) reads it as a whole buffer; keep it at root"
                )
        if isinstance(op, ScanOp):
            for t in (*op.update, *op.init):
                if t.op in sch and sch[t.op].attach_type == "scope":
                    raise ScheduleError(
                        f"compute_at: '{t.name}' is the init or update of scan '{stage.name}', "
                        f"which places it itself; attach the stages it reads to it instead"
                    )


# -- nests ----------------------------------------------------------------------------------------
def stage_nest(builder: Any, stage: Stage) -> Stmt | None:
    """The statement of an extern or scan stage (None for any other stage)."""
    if isinstance(stage.op, ExternOp):
        return _extern_nest(builder, stage.op)
    if isinstance(stage.op, ScanOp):
        return _scan_nest(builder, stage)
    return None


def _extern_nest(builder: Any, op: ExternOp) -> Stmt:
    mapping: dict[int, Buffer] = {}
    for eb, t in zip(op.input_buffers, op.inputs):
        mapping[id(eb)] = builder.buffer_of(t)
    for i, eb in enumerate(op.output_buffers):
        mapping[id(eb)] = builder.buffer_of(op.output(i))
    if op.stmt is not None:
        return _lower_built(op.stmt, mapping, op.name)
    return seq(*[Evaluate(lower_buffers(call, mapping, op.name)) for call in op.body])


def _lower_built(stmt: Stmt, mapping: dict[int, Buffer], where: str) -> Stmt:
    """An ir_builder's statement with the stage's buffers in place of its views of them."""

    def buffer(view: ExternBufferView) -> Buffer:
        try:
            return mapping[id(view.extern)]
        except KeyError:
            raise ScheduleError(
                f"'{where}': the ir_builder program uses buffer '{view.name}', which is none of "
                f"the stage's inputs or outputs"
            ) from None

    def index(buf: Buffer, flat: Expr) -> tuple[Expr, ...]:
        # a view's index is flat and row-major: a strided buffer takes it per dimension
        return (flat,) if buf.strides is None else unflatten(buf, flat)

    def rule(n: Any) -> Any:
        match n:
            case BufferLoad(buffer=ExternBufferView() as view, indices=(flat,), predicate=p):
                buf = buffer(view)
                return BufferLoad(buf, index(buf, flat), p)
            case BufferStore(buffer=ExternBufferView() as view, indices=(flat,)):
                buf = buffer(view)
                return dataclasses.replace(n, buffer=buf, indices=index(buf, flat))
        return None

    return lower_buffers(rewrite(stmt, rule), mapping, where)


def lower_buffers(expr: Expr, mapping: dict[int, Buffer], where: str) -> Expr:
    """ExternBuffer arguments -> the IR buffers holding them (AccessPtr -> AddressOf)."""

    def buffer(eb: ExternBuffer) -> Buffer:
        try:
            return mapping[id(eb)]
        except KeyError:
            raise ScheduleError(
                f"'{where}': the call uses buffer '{eb.name}', which is none of the stage's "
                f"inputs or outputs"
            ) from None

    def rule(n: Any) -> Any:
        if isinstance(n, BufferArg):
            return WholeBuffer(buffer(n.buffer))
        if isinstance(n, AccessPtr):
            buf = buffer(n.buffer)
            return AddressOf(BufferLoad(buf, unflatten(buf, n.offset)))
        return None

    return rewrite(expr, rule)


def unflatten(buf: Buffer, offset: Expr) -> tuple[Expr, ...]:
    """The n-d index of element `offset` of a dense buffer."""
    indices: list[Expr] = []
    rest = offset
    for d in reversed(range(len(buf.shape))):
        if d == 0:
            indices.append(simplify_expr(rest))
        else:
            indices.append(simplify_expr(rest % buf.shape[d]))
            rest = rest // buf.shape[d]
    return tuple(reversed(indices)) or (simplify_expr(offset),)


def _scan_nest(builder: Any, stage: Stage) -> Stmt:
    op: ScanOp = stage.op
    sch = stage.schedule
    parts: list[Stmt] = []
    for i, t in enumerate(op.init):
        if isinstance(t.op, PlaceholderOp):  # an input: copy its rows in
            parts.append(_copy(builder.buffer_of(t), builder.buffer_of(op.output(i)), t.shape))
    parts += [builder.stage_nest(s) for s in _init_stages(sch, op)]
    time = op.scan_axis

    def step() -> Stmt:
        stages = _body_stages(sch, op)
        body = seq(*[builder.stage_nest(s) for s in stages])
        for s in reversed(stages):  # each intermediate exists for the stages after it
            body = builder.realize_of(s, body)
        return body

    loop = builder.with_range(time.var, time.dom.min, time.dom.extent, step)
    low, extent = widen(time.dom.min, time.var.dtype), widen(time.dom.extent, time.var.dtype)
    parts.append(For(time.var, low, simplify_expr(extent), loop))
    return seq(*parts)


def _copy(src: Buffer, dst: Buffer, shape: tuple[Expr, ...]) -> Stmt:
    loop_vars = [Var(f"{src.name}.c{d}", extent.dtype) for d, extent in enumerate(shape)]
    stmt: Stmt = BufferStore(dst, tuple(loop_vars), BufferLoad(src, tuple(loop_vars)))
    for v, extent in reversed(list(zip(loop_vars, shape))):
        stmt = For(v, const(0, v.dtype), extent, stmt)
    return stmt
