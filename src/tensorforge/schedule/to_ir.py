"""Schedule -> PrimFunc: inline, infer bounds, allocate buffers, build every stage's loop nest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import Attr, PrimFunc, Realize, Stmt, seq
from tensorforge.schedule import opaque_ops
from tensorforge.schedule.bounds import infer_bounds, infer_scopes
from tensorforge.schedule.dataflow import resolve
from tensorforge.schedule.loops import NestBuilder
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Expr, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import ComputeOp, PlaceholderOp, Tensor
from tensorforge.te.visit import rewrite, walk


def inline_bodies(sch: Schedule) -> dict[int, tuple[Expr, ...]]:
    """Each compute op's expressions with every inlined stage substituted (keyed by id(op))."""
    bodies: dict[int, tuple[Expr, ...]] = {}
    inlined: dict[int, ComputeOp] = {}
    for stage in sch.stages:  # topological: producers first, so their bodies are final
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue

        def rule(n: Any) -> Any:
            if isinstance(n, TensorRead) and id(n.tensor.op) in inlined:
                producer = inlined[id(n.tensor.op)]
                mapping = {iv.var: i for iv, i in zip(producer.axis, n.indices)}
                return substitute(bodies[id(producer)][0], mapping)
            return None

        bodies[id(op)] = tuple(rewrite(b, rule) for b in op.body)
        if stage.attach_type == "inline":
            inlined[id(op)] = op
    return bodies


def _check_attachments(sch: Schedule) -> None:
    for stage in sch.stages:
        if stage.attach_type != "scope":
            continue
        parent = stage.attach_stage
        if parent.attach_type == "inline":
            raise ScheduleError(
                f"compute_at: '{stage.name}' is computed at '{parent.name}', which is inlined"
            )
        if stage.attach_ivar not in parent.leaf_iter_vars:
            raise ScheduleError(
                f"compute_at: '{stage.name}' is computed at '{stage.attach_ivar.name}', which is no "
                f"longer a leaf axis of '{parent.name}' (it was split or fused afterwards); leaf "
                f"axes are: {parent._leaf_names()}"
            )
        if not sch.consumes(parent, stage):
            raise ScheduleError(
                f"compute_at: stage '{parent.name}' does not consume '{stage.name}'"
            )


def split_args(args: Sequence[Any]) -> tuple[list[Tensor], list[Var]]:
    tensors, scalars = [], []
    for position, a in enumerate(args):
        if isinstance(a, Tensor):
            if a in tensors:
                raise ScheduleError(f"lower: tensor '{a.name}' appears twice in args")
            tensors.append(a)
        elif isinstance(a, Var):
            scalars.append(a)
        else:
            raise ScheduleError(
                f"lower: args[{position}] is {a!r}; args must be tensors (te.placeholder / te.compute "
                f"results) or te.var scalars"
            )
    return tensors, scalars


def schedule_to_func(sch: Schedule, args: Sequence[Any], name: str) -> PrimFunc:
    tensors, _scalars = split_args(args)
    tensors = [resolve(sch, t) for t in tensors]  # cache_write/rfactor replace ops
    _check_attachments(sch)
    opaque_ops.check(sch)
    arg_ops = {id(t.op) for t in tensors} | opaque_ops.internal_placeholders(sch)
    for stage in sch.stages:
        if isinstance(stage.op, PlaceholderOp) and id(stage.op) not in arg_ops:
            readers = ", ".join(s.name for s in sch.readers_of(stage))
            raise ScheduleError(
                f"lower: placeholder '{stage.name}' (read by {readers}) is not in args; pass every "
                f"input and output tensor"
            )
    for op in sch.outputs:
        for i in range(op.num_outputs):
            if id(op) not in arg_ops or op.output(i) not in tensors:
                raise ScheduleError(
                    f"lower: output '{op.output(i).name}' is not in args; pass every input and output tensor"
                )
    infer_scopes(sch)
    bodies = inline_bodies(sch)
    bounds = infer_bounds(sch, bodies)

    buffers: dict[Tensor, Buffer] = {}
    for t in tensors:
        buffers[t] = Buffer(t.name, tuple(t.shape), t.dtype, "global")
    regions: dict[int, tuple[tuple[Expr, ...], tuple[Expr, ...]]] = {}
    alias = opaque_ops.aliases(sch)  # a scan's state, init and update live in its buffer
    for stage in sch.stages:
        info = bounds.get(id(stage))
        if info is None:
            continue
        mins = tuple(info.mins[iv] for iv in stage.op.axis)
        extents = tuple(info.extents[iv] for iv in stage.op.axis)
        regions[id(stage)] = (mins, extents)
        for i in range(stage.op.num_outputs):
            t = stage.op.output(i)
            if t not in buffers and t not in alias:
                strides = _aligned_strides(stage, extents)
                buffers[t] = Buffer(t.name, extents, t.dtype, stage.scope, strides)
    for t, home in alias.items():
        buffers[t] = buffers[home]

    def buffer_of(t: Tensor) -> Buffer:
        try:
            return buffers[t]
        except KeyError:
            raise ScheduleError(
                f"lower: tensor '{t.name}' is read but neither computed nor an argument"
            ) from None

    def realize_of(stage: Stage, body: Stmt) -> Stmt:
        mins, extents = regions[id(stage)]
        for i in reversed(range(stage.op.num_outputs)):
            t = stage.op.output(i)
            if t not in tensors and t not in alias:
                body = Realize(buffers[t], mins, extents, body)
                if stage.double_buffered:
                    body = Attr("double_buffer", t.name, body)
        return body

    attached: dict[int, list[Stage]] = {}
    for stage in sch.stages:
        if stage.attach_type == "scope" and id(stage) in bounds:
            attached.setdefault(id(stage.attach_ivar), []).append(stage)
    builder = NestBuilder(bounds, buffer_of, attached, realize_of)
    nested = opaque_ops.nested_stages(sch)  # emitted inside a scan's time loop
    roots = [
        s for s in sch.stages if id(s) in bounds and s.attach_type == "root" and id(s) not in nested
    ]
    body = seq(*[builder.stage_nest(s) for s in roots])
    for stage in reversed(roots):
        body = realize_of(stage, body)

    shape_vars = _shape_vars(tensors)
    # parameters keep the order of `args` (as in TVM); symbolic sizes, bound from the arrays'
    # shapes at call time, come last
    params: list = []
    for a in args:
        if isinstance(a, Tensor):
            params.append(buffers[resolve(sch, a)])
        elif all(a is not v for v in shape_vars):
            params.append(a)
    params += shape_vars
    _check_free_vars(body, tuple(params), name)
    return PrimFunc(name, tuple(params), body)


def _aligned_strides(stage: Stage, extents: tuple[Expr, ...]) -> tuple[Expr, ...] | None:
    """Row-major strides with `storage_align` padding applied (None when dense)."""
    if not stage.storage_align_:
        return None
    strides: list[Expr] = [const(1)] * len(extents)
    running: Expr = const(1)
    for d in reversed(range(len(extents))):
        if d in stage.storage_align_:
            factor, offset = stage.storage_align_[d]
            # the smallest stride >= the dense one that is `offset` modulo `factor`
            running = simplify_expr((running - offset + factor - 1) // factor * factor + offset)
        strides[d] = running
        running = simplify_expr(running * extents[d])
    return tuple(strides)


def _shape_vars(tensors: list[Tensor]) -> list[Var]:
    seen: list[Var] = []
    for t in tensors:
        for extent in t.shape:
            for n in walk(extent):
                if isinstance(n, Var) and all(n is not s for s in seen):
                    seen.append(n)
    return seen


def _check_free_vars(body: Stmt, params: tuple, name: str) -> None:
    from tensorforge.ir.stmt import For, LetStmt

    defined = {id(p) for p in params if isinstance(p, Var)}
    for n in walk(body):
        if isinstance(n, (For, LetStmt)):
            defined.add(id(n.var))
    for n in walk(body):
        if isinstance(n, Var) and id(n) not in defined:
            raise ScheduleError(
                f"lower '{name}': variable '{n.name}' is used but is neither a loop variable nor an "
                f"argument; pass it in args (a te.var scalar) or use it in an argument's shape"
            )
