"""te.scan: a recurrence over the first axis (TVM semantics).

`te.scan(init, update, state)` is a tensor of state's shape whose rows [0, init.shape[0]) are
`init` and whose row t, for every later t, is `update[t]`, where `update` may read the state
at earlier rows (`state[t - 1, i]`). Lowering runs the update inside one loop over t, with the
state, the init and the update all stored in the scan's own buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te.expr import Const, Expr, Sub, TensorRead, Var, const
from tensorforge.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Range, Tensor


@dataclass(eq=False)
class ScanOp(Operation):
    """Output i is state i over time: rows [0, init_len) from `init[i]`, later rows from
    `update[i]`. `scan_axis` is the time loop over [init_len, T); `axis` spans the output
    shape (for bounds and buffers)."""

    name: str
    tag: str
    attrs: dict
    init: tuple[Tensor, ...]
    update: tuple[Tensor, ...]
    state_placeholder: tuple[Tensor, ...]
    inputs: tuple[Tensor, ...]
    scan_axis: IterVar
    axis: tuple[IterVar, ...]
    reduce_axis: tuple[IterVar, ...] = ()

    @property
    def num_outputs(self) -> int:
        return len(self.update)

    @property
    def shape(self) -> tuple[Expr, ...]:
        return self.state_placeholder[0].shape

    @property
    def init_len(self) -> Expr:
        return self.init[0].shape[0]

    def output_dtype(self, index: int) -> str:
        return self.state_placeholder[index].dtype

    @property
    def input_tensors(self) -> list[Tensor]:
        seen: list[Tensor] = []
        for t in (*self.init, *self.update, *self.inputs):
            if t not in seen:
                seen.append(t)
        return seen

    def __repr__(self) -> str:
        return f"scan({self.name})"


def _as_list(x: Any, what: str, name: str) -> list[Tensor]:
    items = list(x) if isinstance(x, (list, tuple)) else [x]
    for t in items:
        if not isinstance(t, Tensor):
            raise ExprError(f"te.scan '{name}': {what} must be tensors, got {t!r}")
    return items


def _same(a: Expr, b: Expr) -> bool:
    return a is b or str(a) == str(b)


def scan(
    init: Any,
    update: Any,
    state_placeholder: Any,
    inputs: Sequence[Tensor] | None = None,
    name: str = "scan",
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor | list[Tensor]:
    """The recurrence state[t] = update[t] (reading state[t - k], k >= 1), from state[:init_len]
    = init; several states go in lists of equal length."""
    inits = _as_list(init, "init", name)
    updates = _as_list(update, "update", name)
    states = _as_list(state_placeholder, "state_placeholder", name)
    if not (len(inits) == len(updates) == len(states)):
        raise ExprError(
            f"te.scan '{name}': {len(inits)} init, {len(updates)} update and {len(states)} state "
            f"tensors; give one of each per state"
        )
    shape = states[0].shape
    for k, (i, u, s) in enumerate(zip(inits, updates, states)):
        if not isinstance(s.op, PlaceholderOp):
            raise ExprError(f"te.scan '{name}': state {k} ('{s.name}') must be a te.placeholder")
        if not isinstance(u.op, ComputeOp):
            raise ExprError(f"te.scan '{name}': update {k} ('{u.name}') must be a te.compute")
        if len(s.shape) != len(shape) or not all(map(_same, s.shape, shape)):
            raise ExprError(
                f"te.scan '{name}': every state must have the shape of the first "
                f"({', '.join(map(str, shape))}); '{s.name}' has ({', '.join(map(str, s.shape))})"
            )
        for what, t in (("update", u), ("init", i)):
            if t.dtype != s.dtype:
                raise ExprError(
                    f"te.scan '{name}': {what} '{t.name}' is {t.dtype} but state '{s.name}' "
                    f"is {s.dtype}"
                )
            if len(t.shape) != len(shape) or not all(map(_same, t.shape[1:], shape[1:])):
                raise ExprError(
                    f"te.scan '{name}': {what} '{t.name}' has shape "
                    f"({', '.join(map(str, t.shape))}); it must be the state's "
                    f"({', '.join(map(str, shape))}) except along the first (time) axis"
                )
        if not _same(u.shape[0], shape[0]):
            raise ExprError(
                f"te.scan '{name}': update '{u.name}' must span the whole time axis "
                f"({shape[0]}), not {u.shape[0]}"
            )
        if not _same(i.shape[0], inits[0].shape[0]):
            raise ExprError(f"te.scan '{name}': every init must have the same number of rows")
    _check_reads_the_past(name, updates, states)
    init_len = inits[0].shape[0]
    time = Var(f"{name}.idx")
    scan_axis = IterVar(time, Range(init_len, shape[0] - init_len))
    axis = tuple(
        IterVar(Var(f"{name}.ax{d}"), Range(const(0), extent)) for d, extent in enumerate(shape)
    )
    op = ScanOp(
        name,
        tag,
        dict(attrs or {}),
        tuple(inits),
        tuple(updates),
        tuple(states),
        tuple(inputs or ()),
        scan_axis,
        axis,
    )
    outputs = [op.output(i) for i in range(op.num_outputs)]
    return outputs[0] if len(outputs) == 1 else outputs


def _check_reads_the_past(name: str, updates: list[Tensor], states: list[Tensor]) -> None:
    """An update that reads the state at its own row (or later) would read rows not computed."""
    from tensorforge.te.visit import walk

    state_ops = {id(s.op) for s in states}
    for u in updates:
        t = u.op.axis[0].var
        for body in u.op.body:
            for n in walk(body):
                if not (isinstance(n, TensorRead) and id(n.tensor.op) in state_ops):
                    continue
                first = n.indices[0]
                if first is t or (
                    isinstance(first, Sub)
                    and first.a is t
                    and isinstance(first.b, Const)
                    and first.b.value < 1
                ):
                    raise ExprError(
                        f"te.scan '{name}': update '{u.name}' reads state '{n.tensor.name}' at "
                        f"row {first}, which is not computed yet; read earlier rows "
                        f"({t.name} - 1, ...)"
                    )
