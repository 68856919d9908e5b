"""Schedule -> PrimFunc, as named steps (like Halide's `lower_impl`): read `STEPS` and you have
read how a schedule becomes loops.

Each step takes the `Lowering` so far and returns it with one more thing found. Everything found
lives in maps of this lowering (scopes, bodies, bounds, buffers, regions, attachments), never in
the schedule: lowering only reads the schedule, so lowering it twice, or changing it between two
lowerings, gives what a fresh schedule would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import Attr, For, LetStmt, PrimFunc, Realize, Stmt, seq
from tensorforge.schedule import bounds as bound_inference
from tensorforge.schedule import opaque_ops, placement
from tensorforge.schedule.bounds import StageBounds
from tensorforge.schedule.dataflow import resolve
from tensorforge.schedule.loops import NestBuilder
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import Expr, Let, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import ComputeOp, PlaceholderOp, Tensor
from tensorforge.te.visit import rewrite, walk

Region = tuple[tuple[Expr, ...], tuple[Expr, ...]]  # (mins, extents) per data axis


@dataclass(frozen=True)
class Lowering:
    """What lowering one schedule has found so far. Maps are keyed by id(stage) or id(op)."""

    sch: Schedule
    args: tuple[Any, ...]
    name: str
    tensors: tuple[Tensor, ...] = ()  # the tensor arguments, as the schedule now computes them
    scopes: dict[int, str] = field(default_factory=dict)  # id(stage) -> memory scope
    bodies: dict[int, tuple[Expr, ...]] = field(default_factory=dict)  # id(op) -> inlined exprs
    bounds: dict[int, StageBounds] = field(default_factory=dict)  # id(stage) -> bounds
    buffers: dict[Tensor, Buffer] = field(default_factory=dict)
    regions: dict[int, Region] = field(default_factory=dict)  # id(stage) -> realized region
    aliases: dict[Tensor, Tensor] = field(default_factory=dict)  # tensor -> the one it lives in
    body: Stmt | None = None
    params: tuple[Any, ...] = ()


# -- the steps, in order ---------------------------------------------------------------------------
def check_args(low: Lowering) -> Lowering:
    """Tensors and scalar vars only, each tensor once; resolved to what the schedule computes
    now (cache_write and rfactor replace a tensor's op)."""
    tensors, _scalars = split_args(low.args)
    return dataclasses.replace(low, tensors=tuple(resolve(low.sch, t) for t in tensors))


def check_placement(low: Lowering) -> Lowering:
    """compute_at legality, judged on the finished schedule; te.scan's placement rules."""
    placement.check_placement(low.sch)
    opaque_ops.check(low.sch)
    return low


def check_inputs_and_outputs(low: Lowering) -> Lowering:
    """Every placeholder read and every output of the schedule is an argument."""
    sch, tensors = low.sch, low.tensors
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
                    f"lower: output '{op.output(i).name}' is not in args; pass every input and "
                    f"output tensor"
                )
    return low


def infer_scopes(low: Lowering) -> Lowering:
    """The memory scope of each stage (GPU intermediates default by where they are placed)."""
    return dataclasses.replace(low, scopes=placement.infer_scopes(low.sch))


def inline_stages(low: Lowering) -> Lowering:
    """Each op's expressions with the inlined stages substituted."""
    return dataclasses.replace(low, bodies=inline_bodies(low.sch))


def infer_bounds(low: Lowering) -> Lowering:
    """The region each stage computes where it is attached, and every loop's extent."""
    return dataclasses.replace(
        low, bounds=bound_inference.infer_bounds(low.sch, low.bodies, low.scopes)
    )


def allocate_buffers(low: Lowering) -> Lowering:
    """A buffer per argument (global) and per computed intermediate (its region, its scope)."""
    buffers = {t: Buffer(t.name, tuple(t.shape), t.dtype, "global") for t in low.tensors}
    regions: dict[int, Region] = {}
    aliases = opaque_ops.aliases(low.sch)  # a scan's state, init and update live in its buffer
    for stage in low.sch.stages:
        info = low.bounds.get(id(stage))
        if info is None:
            continue
        mins = tuple(info.mins[iv] for iv in stage.op.axis)
        extents = tuple(info.extents[iv] for iv in stage.op.axis)
        regions[id(stage)] = (mins, extents)
        for i in range(stage.op.num_outputs):
            t = stage.op.output(i)
            if t not in buffers and t not in aliases:
                strides = _aligned_strides(stage, extents)
                buffers[t] = Buffer(t.name, extents, t.dtype, low.scopes[id(stage)], strides)
    for t, home in aliases.items():
        buffers[t] = buffers[home]
    return dataclasses.replace(low, buffers=buffers, regions=regions, aliases=aliases)


def build_nests(low: Lowering) -> Lowering:
    """The loop nest of every root stage, with the stages attached inside it, each realized."""
    sch, buffers, tensors = low.sch, low.buffers, low.tensors

    def buffer_of(t: Tensor) -> Buffer:
        try:
            return buffers[t]
        except KeyError:
            raise ScheduleError(
                f"lower: tensor '{t.name}' is read but neither computed nor an argument"
            ) from None

    def realize_of(stage: Stage, body: Stmt) -> Stmt:
        mins, extents = low.regions[id(stage)]
        for i in reversed(range(stage.op.num_outputs)):
            t = stage.op.output(i)
            if t not in tensors and t not in low.aliases:
                body = Realize(buffers[t], mins, extents, body)
                if stage.double_buffered:
                    n, sync = stage.buffer_stages, stage.buffer_sync
                    mark = (t.name, n, sync) if sync != "barrier" else (t.name, n) if n != 2 else t.name  # fmt: skip
                    body = Attr("double_buffer", mark, body)
        return body

    attached: dict[int, list[Stage]] = {}  # id(leaf IterVar) -> stages computed at that loop
    for stage in sch.stages:
        if stage.attach_type == "scope" and id(stage) in low.bounds:
            attached.setdefault(id(stage.attach_ivar), []).append(stage)
    builder = NestBuilder(low.bounds, buffer_of, attached, realize_of)
    nested = opaque_ops.nested_stages(sch)  # emitted inside a scan's time loop
    roots = [
        s
        for s in sch.stages
        if id(s) in low.bounds and s.attach_type == "root" and id(s) not in nested
    ]
    body = seq(*[builder.stage_nest(s) for s in roots])
    for stage in reversed(roots):
        body = realize_of(stage, body)
    return dataclasses.replace(low, body=body)


def order_params(low: Lowering) -> Lowering:
    """Parameters in the order of `args` (as in TVM); symbolic sizes, bound from the arrays'
    shapes at call time, come last. Every free variable of the body must be one of them."""
    shape_vars = _shape_vars(low.tensors)
    params: list = []
    for a in low.args:
        if isinstance(a, Tensor):
            params.append(low.buffers[resolve(low.sch, a)])
        elif all(a is not v for v in shape_vars):
            params.append(a)
    params += shape_vars
    _check_free_vars(low.body, tuple(params), low.name)
    return dataclasses.replace(low, params=tuple(params))


STEPS: list[Callable[[Lowering], Lowering]] = [
    check_args,
    check_placement,
    check_inputs_and_outputs,
    infer_scopes,
    inline_stages,
    infer_bounds,
    allocate_buffers,
    build_nests,
    order_params,
]


def schedule_to_func(
    sch: Schedule, args: Sequence[Any], name: str, trace: bool = False
) -> PrimFunc:
    """The loop IR of `sch` (before the IR passes). With `trace`, print what each step found."""
    low = Lowering(sch, tuple(args), name)
    for step in STEPS:
        before, low = low, step(low)
        if trace:
            print(f"# schedule: after {step.__name__}\n{describe(before, low)}")
    return PrimFunc(name, low.params, low.body)


def stage_bounds(sch: Schedule) -> dict[int, StageBounds]:
    """The bounds lowering would infer for `sch` (keyed by id(stage)), for tools that pick
    schedule steps by loop extents (the fuzzer)."""
    low = Lowering(sch, (), "")
    for step in (check_placement, infer_scopes, inline_stages, infer_bounds):
        low = step(low)
    return low.bounds


# -- trace -----------------------------------------------------------------------------------------
def describe(before: Lowering, after: Lowering) -> str:
    """What a step added to the lowering, in the user's names ("(checked)" if nothing)."""
    lines: list[str] = []
    stages = after.sch.stages
    if after.tensors is not before.tensors:
        lines.append("args: " + ", ".join(t.name for t in after.tensors))
    if after.scopes is not before.scopes:
        lines += [
            f"{s.name}: {after.scopes[id(s)]}"
            for s in stages
            if isinstance(s.op, ComputeOp) and s.attach_type != "inline"
        ]
    if after.bodies is not before.bodies:
        for s in stages:
            if isinstance(s.op, ComputeOp) and s.attach_type != "inline":
                lines.append(f"{s.name} = " + ", ".join(map(str, after.bodies[id(s.op)])))
    if after.bounds is not before.bounds:
        for s in stages:
            info = after.bounds.get(id(s))
            if info is not None:
                loops = ", ".join(f"{iv.name}: {info.extents[iv]}" for iv in s.leaf_iter_vars)
                lines.append(f"{s.name}: loops {loops}")
    if after.regions is not before.regions:
        for s in stages:
            if id(s) in after.regions:
                mins, extents = after.regions[id(s)]
                region = ", ".join(
                    f"{lo}:{simplify_expr(lo + ext)}" for lo, ext in zip(mins, extents)
                )
                buf = after.buffers[s.op.output(0)]
                home = f" in {buf.name}" if buf.name != s.name else ""
                lines.append(f"{s.name}[{region}]{home} ({buf.scope})")
    if after.body is not before.body:
        lines.append(str(after.body))
    if after.params is not before.params:
        lines.append("params: " + ", ".join(p.name for p in after.params))
    return "\n".join(f"  {line}" for text in lines for line in text.splitlines()) or "  (checked)"


# -- helpers -----------------------------------------------------------------------------------------
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
                f"lower: args[{position}] is {a!r}; args must be tensors (te.placeholder / "
                f"te.compute results) or te.var scalars"
            )
    return tensors, scalars


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


def _shape_vars(tensors: Sequence[Tensor]) -> list[Var]:
    seen: list[Var] = []
    for t in tensors:
        for extent in t.shape:
            for n in walk(extent):
                if isinstance(n, Var) and all(n is not s for s in seen):
                    seen.append(n)
    return seen


def _check_free_vars(body: Stmt, params: tuple, name: str) -> None:
    defined = {id(p) for p in params if isinstance(p, Var)}
    for n in walk(body):
        if isinstance(n, (For, LetStmt, Let)):  # (a Let expression binds its var too)
            defined.add(id(n.var))
    for n in walk(body):
        if isinstance(n, Var) and id(n) not in defined:
            raise ScheduleError(
                f"lower '{name}': variable '{n.name}' is used but is neither a loop variable nor "
                f"an argument; pass it in args (a te.var scalar) or use it in an argument's shape"
            )
