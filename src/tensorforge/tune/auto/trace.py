"""A schedule as data: the primitive calls, in order, that build it (replayable, printable, JSON).

A Step names its stage by position in `s.stages` and its axes by position in that stage's
`leaf_iter_vars`, both as they are when the step runs. Replaying the steps on a fresh schedule of
the same computation therefore rebuilds the same schedule; no names are looked up, so two stages
or axes of one name cannot be confused.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.te.tensor import IterVar, Tensor

# the primitives a step may call; each is applied by `_apply_one` and printed by `_print_one`
KINDS = (
    "split",
    "fuse",
    "reorder",
    "parallel",
    "vectorize",
    "unroll",
    "pragma",
    "bind",
    "compute_at",
    "compute_inline",
    "compute_root",
    "cache_write",
    "cache_read",
    "rfactor",
    "set_scope",
    "storage_align",
    "prefetch",
    "double_buffer",
)


@dataclass(frozen=True)
class Step:
    """One primitive call: `kind` on stage number `stage`, leaf axes `axes`, other `params`."""

    kind: str
    stage: int
    axes: tuple[int, ...] = ()
    params: tuple = ()

    def to_json(self) -> list:
        return [self.kind, self.stage, list(self.axes), _to_json(self.params)]

    @staticmethod
    def from_json(data: Sequence[Any]) -> Step:
        kind, stage, axes, params = data
        if kind not in KINDS:
            raise ValueError(f"unknown schedule step {kind!r}")
        return Step(str(kind), int(stage), tuple(int(a) for a in axes), _from_json(params))


def _to_json(value: Any) -> Any:
    return [_to_json(v) for v in value] if isinstance(value, (tuple, list)) else value


def _from_json(value: Any) -> Any:
    return tuple(_from_json(v) for v in value) if isinstance(value, list) else value


# -- applying -----------------------------------------------------------------------------------


def apply_steps(s: Any, steps: Sequence[Step]) -> Any:
    """Replay `steps` on schedule `s` (fresh, of the computation they were recorded on)."""
    for number, step in enumerate(steps):
        try:
            _apply_one(s, step)
        except (IndexError, KeyError) as e:
            raise ScheduleError(
                f"schedule step {number} ({step.kind} on stage {step.stage}) does not fit this "
                f"schedule: {e}"
            ) from None
    return s


def _apply_one(s: Any, step: Step) -> Any:
    stage = s.stages[step.stage]
    leaves = stage.leaf_iter_vars
    axes = [leaves[a] for a in step.axes]
    p = step.params
    match step.kind:
        case "split":
            return stage.split(axes[0], factor=p[0], tail=p[1] if len(p) > 1 else "auto")
        case "fuse":
            return stage.fuse(*axes)
        case "reorder":
            return stage.reorder(*axes)
        case "parallel" | "vectorize" | "unroll":
            return getattr(stage, step.kind)(axes[0])
        case "pragma":
            return stage.pragma(axes[0], p[0], p[1])
        case "bind":
            from tensorforge import te

            return stage.bind(axes[0], te.thread_axis(p[0]))
        case "compute_at":
            parent = s.stages[p[0]]
            return stage.compute_at(parent, parent.leaf_iter_vars[p[1]])
        case "compute_inline":
            return stage.compute_inline()
        case "compute_root":
            return stage.compute_root()
        case "cache_write":
            return s.cache_write(stage.op.output(0), p[0])
        case "cache_read":
            readers = [s.stages[r].op for r in p[1]]
            return s.cache_read(stage.op.output(0), p[0], readers)
        case "rfactor":
            return s.rfactor(stage.op.output(0), axes[0], p[0])
        case "set_scope":
            return stage.set_scope(p[0])
        case "storage_align":
            return stage.storage_align(stage.op.axis[p[0]], p[1], p[2])
        case "prefetch":
            return stage.prefetch(s.stages[p[0]].op.output(0), axes[0], p[1])
        case "double_buffer":
            return stage.double_buffer(p[0])
    raise ValueError(f"unknown schedule step {step.kind!r}")


class Recorder:
    """Applies primitives to a schedule and records each as a Step (the sketch rules call this)."""

    def __init__(self, s: Any):
        self.s = s
        self.steps: list[Step] = []

    def index(self, stage: Any) -> int:
        return self.s.stages.index(stage)

    def _do(self, kind: str, stage: Any, axes: Sequence[IterVar] = (), params: tuple = ()) -> Any:
        leaves = stage.leaf_iter_vars
        step = Step(kind, self.index(stage), tuple(leaves.index(a) for a in axes), params)
        result = _apply_one(self.s, step)
        self.steps.append(step)
        return result

    def split(self, stage: Any, axis: IterVar, factor: int) -> tuple[IterVar, IterVar]:
        return self._do("split", stage, [axis], (int(factor),))

    def split_many(self, stage: Any, axis: IterVar, inner: Sequence[int]) -> list[IterVar]:
        """Split `axis` into len(inner) + 1 loops whose inner extents are `inner` (outer first)."""
        loops, rest = [], axis
        for k in range(len(inner)):
            outer, rest = self.split(stage, rest, _product(inner[k:]))
            loops.append(outer)
        return [*loops, rest]

    def fuse(self, stage: Any, axes: Sequence[IterVar]) -> IterVar:
        return axes[0] if len(axes) == 1 else self._do("fuse", stage, axes)

    def reorder(self, stage: Any, axes: Sequence[IterVar]) -> None:
        if [a for a in stage.leaf_iter_vars if a in axes] != list(axes):
            self._do("reorder", stage, axes)

    def annotate(self, kind: str, stage: Any, axis: IterVar) -> None:
        self._do(kind, stage, [axis])

    def pragma(self, stage: Any, axis: IterVar, name: str, value: Any) -> None:
        self._do("pragma", stage, [axis], (name, value))

    def bind(self, stage: Any, axis: IterVar, tag: str) -> None:
        self._do("bind", stage, [axis], (tag,))

    def compute_at(self, stage: Any, parent: Any, axis: IterVar) -> None:
        self._do("compute_at", stage, (), (self.index(parent), parent.leaf_iter_vars.index(axis)))

    def compute_inline(self, stage: Any) -> None:
        self._do("compute_inline", stage)

    def cache_write(self, stage: Any, scope: str) -> Any:
        return self.s[self._do("cache_write", stage, (), (scope,))]

    def cache_read(self, stage: Any, scope: str, readers: Sequence[Any]) -> Any:
        params = (scope, tuple(self.index(r) for r in readers))
        return self.s[self._do("cache_read", stage, (), params)]

    def rfactor(self, stage: Any, axis: IterVar, factor_axis: int) -> Any:
        return self.s[self._do("rfactor", stage, [axis], (factor_axis,))]

    def set_scope(self, stage: Any, scope: str) -> None:
        self._do("set_scope", stage, (), (scope,))

    def prefetch(self, stage: Any, tensor_stage: Any, axis: IterVar, offset: int) -> None:
        self._do("prefetch", stage, [axis], (self.index(tensor_stage), int(offset)))

    def storage_align(self, stage: Any, dim: int, factor: int, offset: int) -> None:
        self._do("storage_align", stage, (), (dim, factor, offset))

    def double_buffer(self, stage: Any, stages: int) -> None:
        self._do("double_buffer", stage, (), (int(stages),))


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


# -- printing -------------------------------------------------------------------------------------


def to_python(s: Any, args: Sequence[Tensor], steps: Sequence[Step], call: str = "") -> str:
    """`steps` as the Python a user would write: replayed on `s` (a fresh schedule of `args`),
    naming tensors and axes as they appear. `call` is the line that makes `args`, if any."""
    names = _Names(s, args)
    lines = [f"{', '.join(names.stage(s[t]) for t in args)} = {call}"] if call else []
    outputs = ", ".join(f"{names.stage(s[op])}.op" for op in s.outputs)
    lines.append(f"s = te.create_schedule([{outputs}])")
    for step in steps:
        lines.extend(_print_one(s, step, names))
    return "\n".join(lines)


class _Names:
    """Python identifiers for stages (their tensors) and axes, unique, defined on first use."""

    def __init__(self, s: Any, args: Sequence[Tensor]):
        self.taken: set[str] = {"s", "te", "tf"}
        self.of: dict[int, str] = {}  # id(stage) or id(IterVar) -> identifier
        self.pending: list[str] = []  # lines defining names on first use
        self.paths: dict[int, str] = {}  # id(stage) -> how to reach its tensor from the args
        for t in args:
            self.of[id(s[t])] = self.fresh(t.name)
        for stage in s.stages:
            if id(stage) not in self.of:
                self.paths[id(stage)] = _path_to(stage.op, args)

    def fresh(self, hint: str) -> str:
        base = re.sub(r"\W+", "_", hint.replace(".outer", "_o").replace(".inner", "_i"))
        base = base.strip("_") or "x"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = "_" + base
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}_{k}"
        self.taken.add(name)
        return name

    def stage(self, stage: Any) -> str:
        if id(stage) not in self.of:
            name = self.of[id(stage)] = self.fresh(stage.op.name)
            self.pending.append(f"{name} = {self.paths.get(id(stage), stage.op.name)}")
        return self.of[id(stage)]

    def axis(self, iv: IterVar, stage: Any) -> str:
        if id(iv) not in self.of:
            name = self.of[id(iv)] = self.fresh(iv.name)
            st, op = self.stage(stage), stage.op
            if iv in op.axis:
                self.pending.append(f"{name} = s[{st}].op.axis[{list(op.axis).index(iv)}]")
            else:
                where = list(op.reduce_axis).index(iv)
                self.pending.append(f"{name} = s[{st}].op.reduce_axis[{where}]")
        return self.of[id(iv)]


def _path_to(op: Any, args: Sequence[Tensor]) -> str:
    """A Python expression reaching `op`'s first output from one of `args` (via input_tensors)."""
    parent: dict[int, tuple[Any, int] | None] = {id(t.op): None for t in args}
    names = {id(t.op): t.name for t in args}
    queue = [t.op for t in args]
    while queue:
        current = queue.pop(0)
        for k, t in enumerate(current.input_tensors):
            if id(t.op) not in parent:
                parent[id(t.op)] = (current, k)
                queue.append(t.op)
    if id(op) not in parent:
        return op.name
    parts, node = [], op
    while parent[id(node)] is not None:
        node, k = parent[id(node)]
        parts.append(f".op.input_tensors[{k}]")
    return names[id(node)] + "".join(reversed(parts))


def _print_one(s: Any, step: Step, names: _Names) -> list[str]:
    """The printed line of `step` (after any lines defining names it uses); applies the step."""
    stage = s.stages[step.stage]
    st = names.stage(stage)
    axes = [names.axis(stage.leaf_iter_vars[a], stage) for a in step.axes]
    p = step.params
    new_names: list[str] = []
    match step.kind:
        case "split":
            base = stage.leaf_iter_vars[step.axes[0]].name
            new_names = [names.fresh(base + ".o"), names.fresh(base + ".i")]
            tail = f", tail={p[1]!r}" if len(p) > 1 and p[1] != "auto" else ""
            line = f"{new_names[0]}, {new_names[1]} = s[{st}].split({axes[0]}, factor={p[0]}{tail})"
        case "fuse":
            new_names = [names.fresh("_".join(axes) if len(axes) < 3 else "fused")]
            line = f"{new_names[0]} = s[{st}].fuse({', '.join(axes)})"
        case "reorder":
            line = f"s[{st}].reorder({', '.join(axes)})"
        case "parallel" | "vectorize" | "unroll":
            line = f"s[{st}].{step.kind}({axes[0]})"
        case "pragma":
            line = f"s[{st}].pragma({axes[0]}, {p[0]!r}, {p[1]!r})"
        case "bind":
            line = f"s[{st}].bind({axes[0]}, te.thread_axis({p[0]!r}))"
        case "compute_at":
            parent = s.stages[p[0]]
            axis = names.axis(parent.leaf_iter_vars[p[1]], parent)
            line = f"s[{st}].compute_at(s[{names.stage(parent)}], {axis})"
        case "compute_inline" | "compute_root":
            line = f"s[{st}].{step.kind}()"
        case "cache_write" | "cache_read":
            new_names = [names.fresh(f"{st}_{p[0]}")]
            readers = ""
            if step.kind == "cache_read":
                readers = ", [" + ", ".join(names.stage(s.stages[r]) for r in p[1]) + "]"
            line = f"{new_names[0]} = s.{step.kind}({st}, {p[0]!r}{readers})"
        case "rfactor":
            new_names = [names.fresh(f"{st}_rf")]
            line = f"{new_names[0]} = s.rfactor({st}, {axes[0]}, factor_axis={p[0]})"
        case "set_scope":
            line = f"s[{st}].set_scope({p[0]!r})"
        case "storage_align":
            line = f"s[{st}].storage_align(s[{st}].op.axis[{p[0]}], {p[1]}, {p[2]})"
        case "prefetch":
            line = f"s[{st}].prefetch({names.stage(s.stages[p[0]])}, {axes[0]}, {p[1]})"
        case "double_buffer":
            line = f"s[{st}].double_buffer({p[0]})"
        case _:
            raise ValueError(f"unknown schedule step {step.kind!r}")
    out, names.pending = [*names.pending, line], []
    before = {id(x) for x in s.stages}
    result = _apply_one(s, step)
    if step.kind == "split":
        names.of[id(result[0])], names.of[id(result[1])] = new_names
    elif step.kind == "fuse":
        names.of[id(result)] = new_names[0]
    elif new_names:  # a new stage: named after the tensor the call returned
        (new_stage,) = [x for x in s.stages if id(x) not in before]
        names.of[id(new_stage)] = new_names[0]
    return out
