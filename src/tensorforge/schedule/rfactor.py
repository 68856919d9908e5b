"""rfactor: split a reduction into a parallel partial reduction and a final one."""

from __future__ import annotations

from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import simplify_expr
from tensorforge.schedule.dataflow import replace_dataflow, replace_op
from tensorforge.schedule.iter_math import iter_extents, iter_values
from tensorforge.schedule.schedule import Schedule
from tensorforge.te.expr import And, Const, Reduce, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import ComputeOp, IterKind, IterVar, Range, Tensor


def rfactor(sch: Schedule, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Any:
    """Make reduction leaf `axis` of `tensor`'s stage a data axis of a new partial-result tensor.

    `C[i] = sum(A[i, k])` with k split into (ko, ki) and `rfactor(C, ki)` gives
    `CF[ki, i] = sum over ko of A[i, ko*f + ki]` and `C[i] = sum over ki of CF[ki, i]`.
    """
    stage = sch[tensor]
    op = stage.op
    if not isinstance(op, ComputeOp) or not op.is_reduction:
        raise ScheduleError(f"rfactor: '{stage.name}' is not a reduction")
    if not isinstance(axis, IterVar) or axis not in stage.leaf_iter_vars:
        raise ScheduleError(
            f"rfactor: '{getattr(axis, 'name', axis)}' is not a leaf axis of stage '{stage.name}'; "
            f"leaf axes are: {stage._leaf_names()}"
        )
    if axis.kind is not IterKind.REDUCE:
        reduce_leaves = [v.name for v in stage.leaf_iter_vars if v.kind is IterKind.REDUCE]
        raise ScheduleError(
            f"rfactor: '{axis.name}' of stage '{stage.name}' is not a reduction axis; reduction axes "
            f"are: {', '.join(reduce_leaves)}"
        )
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(
            f"rfactor of '{stage.name}': factor_axis must be in [0, {len(op.axis)}]"
        )
    red: Reduce = op.body[0]
    root_extents = {iv: iv.dom.extent for iv in op.reduce_axis}
    for iv in op.axis:
        root_extents[iv] = iv.dom.extent
    extents = iter_extents(stage, root_extents)
    leaves = [v for v in stage.leaf_iter_vars if v.kind is IterKind.REDUCE]
    # fresh iter vars for the partial reduction: `axis` becomes a data axis, other leaves reduce
    new_data = IterVar(Var(axis.name), Range(const(0), extents[axis]))
    new_reduce = {
        v: IterVar(Var(v.name), Range(const(0), extents[v]), IterKind.REDUCE)
        for v in leaves
        if v is not axis
    }
    leaf_values = {axis: new_data.var, **{v: r.var for v, r in new_reduce.items()}}
    # spatial leaves (the data axes, possibly split already) keep their own variables
    leaf_values.update(
        {iv: iv.var for iv in stage.leaf_iter_vars if iv.kind is not IterKind.REDUCE}
    )
    values = iter_values(stage, extents, leaf_values)
    to_new = {iv.var: simplify_expr(iv.dom.min + values[iv]) for iv in op.reduce_axis}
    data_axis = tuple(IterVar(Var(iv.name), iv.dom) for iv in op.axis)
    to_new.update({iv.var: d.var for iv, d in zip(op.axis, data_axis)})  # fresh spatial axes
    cond = substitute(red.condition, to_new)
    for rel in stage.relations:  # non-divisible splits of reduction axes: keep the tail out
        if not any(v.kind is IterKind.REDUCE for v in rel.sources):
            continue
        for guard in rel.guards(values, extents):
            limit = simplify_expr(guard)
            if not (isinstance(limit, Const) and limit.value):
                cond = And(cond, limit)
    cond = simplify_expr(cond)
    rf_axis = list(data_axis)
    rf_axis.insert(factor_axis, new_data)
    reduce_list = tuple(new_reduce.values())
    sources = tuple(substitute(s, to_new) for s in red.source)
    if reduce_list:
        bodies = tuple(
            Reduce(red.combiner, sources, reduce_list, cond, i) for i in range(len(sources))
        )
    else:  # every reduction leaf became the factor axis: the partial result is the value itself
        bodies = (
            tuple(sources)
            if isinstance(cond, Const) and cond.value
            else tuple(
                _select_identity(cond, s, ident) for s, ident in zip(sources, red.combiner.identity)
            )
        )
    rf_op = ComputeOp(f"{op.name}.rf", op.tag, dict(op.attrs), tuple(rf_axis), reduce_list, bodies)
    # the original stage reduces the partial results over the factor axis
    final_axis = tuple(IterVar(Var(iv.name), iv.dom) for iv in op.axis)
    k = IterVar(Var(axis.name + ".v"), Range(const(0), extents[axis]), IterKind.REDUCE)
    index = [iv.var for iv in final_axis]
    index.insert(factor_axis, k.var)
    final_sources = tuple(rf_op.output(i)[tuple(index)] for i in range(rf_op.num_outputs))
    final_body = tuple(
        Reduce(red.combiner, final_sources, (k,), const(True), i) for i in range(len(final_sources))
    )
    final_op = ComputeOp(op.name, op.tag, dict(op.attrs), final_axis, (k,), final_body)
    position = sch.stages.index(stage)
    sch._add_stage(rf_op, position)
    mapping = replace_op(sch, stage, final_op)
    stage.all_iter_vars = list(final_axis) + [k]
    stage.leaf_iter_vars = list(final_axis) + [k]
    stage.relations = []
    stage.iter_attrs = {}
    replace_dataflow(sch, mapping)
    outs = [rf_op.output(i) for i in range(rf_op.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def _select_identity(cond, value, identity):
    from tensorforge.te.expr import Select

    return Select(cond, value, identity)
