"""Turn one stage (and the stages attached inside it) into a loop nest of IR statements.

This is the only module that reads schedule relations to build loops. A stage's leaf iter vars
become `For` loops, outermost first; its root axes are recovered from the leaves through the
relations; non-divisible splits get a peeled tail loop or a guard; a reduction gets its init
nest just before its first reduction loop; attached stages are emitted (inside a `Realize` of
their region) at the top of the loop they are attached to.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import Interval, simplify_expr
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import (
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Stmt,
    seq,
)
from tensorforge.schedule.bounds import StageBounds
from tensorforge.schedule.iter_math import iter_extents, iter_values, leaf_descendants
from tensorforge.schedule.relations import Split
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import And, Const, Expr, GE, LT, Reduce, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import IterKind, IterVar, Tensor
from tensorforge.te.visit import rewrite


@dataclass(frozen=True)
class Env:
    """Where the builder is inside one stage's nest."""

    overrides: dict = field(default_factory=dict)  # IterVar -> extent (peeled tails)
    peeled: frozenset = frozenset()  # ids of Splits whose tail is a separate loop
    init_done: bool = False


class NestBuilder:
    """Builds the statement for a stage and, recursively, the stages attached inside it."""

    def __init__(
        self,
        bounds: dict[int, StageBounds],
        buffer_of: Callable[[Tensor], Buffer],
        attached: dict[int, list[Stage]],
        realize_of: Callable[[Stage, Stmt], Stmt],
    ):
        self.bounds = bounds
        self.buffer_of = buffer_of
        self.attached = attached  # id(leaf IterVar) -> stages computed at that loop
        self.realize_of = realize_of
        self.ranges: dict[Var, Interval] = {}  # loop vars in scope

    # -- entry ----------------------------------------------------------------------------------
    def stage_nest(self, stage: Stage) -> Stmt:
        info = self.bounds[id(stage)]
        for iv in stage.leaf_iter_vars:
            attr = stage.iter_attrs.get(iv)
            if attr and attr.kind is LoopKind.VECTORIZED and not isinstance(info.extents[iv], Const):
                raise ScheduleError(
                    f"vectorize: axis '{iv.name}' of stage '{stage.name}' has non-constant extent "
                    f"{info.extents[iv]}; vectorize an axis of constant extent (split it first)"
                )
        return _StageNest(self, info).build(0, Env())

    def with_range(self, var: Var, lo: Expr, extent: Expr, fn: Callable[[], Stmt]) -> Stmt:
        saved = self.ranges.get(var)
        self.ranges[var] = Interval(lo, simplify_expr(lo + extent - 1))
        try:
            return fn()
        finally:
            if saved is None:
                self.ranges.pop(var, None)
            else:
                self.ranges[var] = saved

    def loads(self, expr: Expr) -> Expr:
        """TensorRead -> BufferLoad."""

        def rule(n):
            if isinstance(n, TensorRead):
                return BufferLoad(self.buffer_of(n.tensor), n.indices)
            return None

        return rewrite(expr, rule)


class _StageNest:
    def __init__(self, builder: NestBuilder, info: StageBounds):
        self.b = builder
        self.info = info
        self.stage = info.stage
        self.leaves = info.stage.leaf_iter_vars
        self.reduce_body = info.body[0] if isinstance(info.body[0], Reduce) else None

    # -- the recursive walk over leaf loops ---------------------------------------------------
    def build(self, level: int, env: Env) -> Stmt:
        if level == len(self.leaves):
            return self.update(env)
        iv = self.leaves[level]
        if self.reduce_body is not None and iv.kind is IterKind.REDUCE and not env.init_done:
            init = self.init_nest(level, env)
            return seq(init, self.build(level, replace(env, init_done=True)))
        return self.loop(level, env)

    def loop(self, level: int, env: Env) -> Stmt:
        iv = self.leaves[level]
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
        extent = extents[iv]
        peel = self.peelable_split(level, env, extents)
        if peel is None:
            return self.make_for(iv, const(0), extent, lambda: self.body_at(level, env))
        split, full, rem = peel
        peeled = env.peeled | {id(split)}
        main_env = replace(env, peeled=peeled)
        tail_env = replace(env, peeled=peeled, overrides={**env.overrides, split.inner: rem})
        main = self.make_for(iv, const(0), full, lambda: self.body_at(level, main_env))
        tail = self.make_for(iv, full, const(1), lambda: self.body_at(level, tail_env), tail=True)
        return seq(main, tail)

    def body_at(self, level: int, env: Env) -> Stmt:
        """The inside of loop `level`: stages attached there, then the deeper loops."""
        iv = self.leaves[level]
        inner = self.build(level + 1, env)
        children = self.b.attached.get(id(iv), [])
        if not children:
            return inner
        nests = [self.b.stage_nest(child) for child in children]
        body = seq(*nests, inner)
        for child in reversed(children):
            body = self.b.realize_of(child, body)
        return body

    def make_for(self, iv: IterVar, lo: Expr, extent: Expr, body: Callable[[], Stmt], tail=False) -> Stmt:
        extent = simplify_expr(extent)
        attr = self.stage.iter_attrs.get(iv)
        kind = attr.kind if attr else LoopKind.SERIAL
        tag = attr.thread.thread_tag if attr and attr.thread is not None else ""
        pragmas = tuple(attr.pragmas) if attr else ()
        if kind is LoopKind.VECTORIZED and not isinstance(extent, Const):
            kind = LoopKind.SERIAL  # a symbolic tail: the main loop stays vectorized
        if tail and kind is LoopKind.PARALLEL:
            kind = LoopKind.SERIAL  # a single iteration
        stmt = self.b.with_range(iv.var, lo, extent, body)
        if isinstance(extent, Const) and extent.value <= 0:
            return seq()
        return For(iv.var, lo, extent, stmt, kind, tag, pragmas)

    def peelable_split(self, level: int, env: Env, extents: dict) -> tuple[Split, Expr, Expr] | None:
        """The split whose outer loop is this leaf and whose tail should become its own loop."""
        iv = self.leaves[level]
        for rel in self.stage.relations:
            if not isinstance(rel, Split) or rel.outer is not iv or id(rel) in env.peeled:
                continue
            if rel.tail == "guard" or rel.factor is None:
                return None
            parent_extent = extents[rel.parent]
            rem = simplify_expr(parent_extent % rel.factor)
            if isinstance(rem, Const) and rem.value == 0:
                return None
            if rel.tail == "auto" and not isinstance(rem, Const):
                return None  # symbolic extent: guard
            deeper = self.leaves[level + 1 :]
            if not all(d in deeper for d in leaf_descendants(self.stage, rel.inner)):
                return None  # the inner loop does not sit inside the outer one: guard
            full = simplify_expr(parent_extent // rel.factor)
            return rel, full, rem
        return None

    # -- the innermost statements --------------------------------------------------------------
    def root_values(self) -> tuple[dict[IterVar, Expr], dict[IterVar, Expr]]:
        """(absolute index of each root axis, value of every iter var), from the leaf loop vars."""
        values = iter_values(self.stage, self.info.extents, {iv: iv.var for iv in self.leaves})
        op = self.stage.op
        return {iv: simplify_expr(self.info.mins[iv] + values[iv]) for iv in list(op.axis) + list(op.reduce_axis)}, values

    def predicates(self, env: Env, values: dict, spatial_only: bool) -> list[Expr]:
        """Conditions that keep non-divisible splits and clamped regions inside their domains."""
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
        preds: list[Expr] = []
        for rel in self.stage.relations:
            if not isinstance(rel, Split) or id(rel) in env.peeled:
                continue
            if spatial_only and rel.parent.kind is IterKind.REDUCE:
                continue
            preds.append(LT(values[rel.parent], extents[rel.parent]))
        if self.info.needs_domain_guard:
            for iv in self.stage.op.axis:
                index = self.info.mins[iv] + values[iv]
                preds.append(GE(index, const(0, index.dtype)))
                preds.append(LT(index, iv.dom.extent))
        out = []
        for p in preds:
            p = simplify_expr(p, self.b.ranges)
            if isinstance(p, Const):
                if p.value:
                    continue
            out.append(p)
        return out

    def guarded(self, preds: list[Expr], body: Stmt) -> Stmt:
        if not preds:
            return body
        cond = preds[0]
        for p in preds[1:]:
            cond = And(cond, p)
        return IfThenElse(cond, body)

    def output_buffers(self) -> list[Buffer]:
        op = self.stage.op
        return [self.b.buffer_of(op.output(i)) for i in range(op.num_outputs)]

    def update(self, env: Env) -> Stmt:
        roots, values = self.root_values()
        to_abs = {iv.var: e for iv, e in roots.items()}
        index = tuple(roots[iv] for iv in self.stage.op.axis)
        preds = self.predicates(env, values, spatial_only=False)
        buffers = self.output_buffers()
        if self.reduce_body is None:
            stores = [
                BufferStore(buf, index, self.b.loads(simplify_expr(substitute(body, to_abs))))
                for buf, body in zip(buffers, self.info.body)
            ]
            return self.guarded(preds, seq(*stores))
        red = self.reduce_body
        sources = tuple(self.b.loads(substitute(s, to_abs)) for s in red.source)
        current = tuple(BufferLoad(buf, index) for buf in buffers)
        combined = red.combiner.combine(current, sources)
        if len(buffers) == 1:
            body: Stmt = BufferStore(buffers[0], index, combined[0])
        else:  # evaluate every new value before storing any (argmax reads both outputs)
            temps = [Var(f"{buf.name}_new", buf.dtype) for buf in buffers]
            body = seq(*[BufferStore(buf, index, t) for buf, t in zip(buffers, temps)])
            for t, value in reversed(list(zip(temps, combined))):
                body = LetStmt(t, value, body)
        condition = simplify_expr(self.b.loads(substitute(red.condition, to_abs)))
        if not (isinstance(condition, Const) and condition.value):
            body = IfThenElse(condition, body)
        return self.guarded(preds, body)

    def init_nest(self, level: int, env: Env) -> Stmt:
        """Identity stores over the spatial leaf loops from `level` inwards."""
        spatial = [iv for iv in self.leaves[level:] if iv.kind is not IterKind.REDUCE]

        def nest(k: int) -> Stmt:
            if k == len(spatial):
                roots, values = self.root_values()
                index = tuple(roots[iv] for iv in self.stage.op.axis)
                preds = self.predicates(env, values, spatial_only=True)
                stores = [
                    BufferStore(buf, index, ident)
                    for buf, ident in zip(self.output_buffers(), self.reduce_body.combiner.identity)
                ]
                return self.guarded(preds, seq(*stores))
            iv = spatial[k]
            extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
            return self.make_for(iv, const(0), extents[iv], lambda: nest(k + 1))

        return nest(0)
