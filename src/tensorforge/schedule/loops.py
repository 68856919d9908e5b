"""Turn one stage (and the stages attached inside it) into a loop nest of IR statements.

This is the only module that reads schedule relations to build loops. A stage's leaf iter vars
become `For` loops, outermost first; its root axes are recovered from the leaves through the
relations; non-divisible splits get a peeled tail loop or a guard; a reduction gets its init
nest just before its first reduction loop; attached stages are emitted (inside a `Realize` of
their region) at the top of the loop they are attached to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import Interval, simplify_expr
from tensorforge.ir.arith.index_dtype import widen
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Stmt,
    ThreadAllReduce,
    seq,
)
from tensorforge.schedule import opaque_ops, tensorize
from tensorforge.schedule.bounds import StageBounds
from tensorforge.schedule.iter_math import (
    iter_extents,
    iter_values,
    leaf_descendants,
    splits_depend_on_extent_of,
)
from tensorforge.schedule.prefetch import prefetch_nest
from tensorforge.schedule.relations import Relation, Tail
from tensorforge.schedule.stage import Stage, check_vector_lanes
from tensorforge.te.expr import EQ, GE, LT, And, Const, Expr, Reduce, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import IterKind, IterVar, Tensor
from tensorforge.te.visit import rewrite


@dataclass(frozen=True)
class Env:
    """Where the builder is inside one stage's nest."""

    overrides: dict = field(default_factory=dict)  # IterVar -> extent (peeled tails)
    peeled: frozenset = frozenset()  # ids of relations whose tail is a separate loop
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
        self.bound_tags: dict[str, tuple[Var, Expr]] = {}  # GPU indices bound by enclosing loops

    # -- entry ----------------------------------------------------------------------------------
    def stage_nest(self, stage: Stage) -> Stmt:
        opaque = opaque_ops.stage_nest(self, stage)  # te.extern, te.scan
        if opaque is not None:
            return opaque
        info = self.bounds[id(stage)]
        for iv in stage.leaf_iter_vars:
            attr = stage.iter_attrs.get(iv)
            if (
                attr
                and attr.kind is LoopKind.VECTORIZED
                and not isinstance(info.extents[iv], Const)
            ):
                raise ScheduleError(
                    f"vectorize: axis '{iv.name}' of stage '{stage.name}' has non-constant extent "
                    f"{info.extents[iv]}; vectorize an axis of constant extent (split it first)"
                )
            if attr and attr.kind is LoopKind.VECTORIZED:
                check_vector_lanes(stage, iv, info.extents[iv])
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
        self.thread_reduce = [
            iv
            for iv in self.leaves
            if iv.kind is IterKind.REDUCE and self.kind_of(iv) is LoopKind.THREAD_BINDING
        ]
        if len(self.thread_reduce) > 1:
            names = ", ".join(iv.name for iv in self.thread_reduce)
            raise ScheduleError(
                f"bind: stage '{self.stage.name}' binds several reduction axes ({names}) to threads; "
                f"a cross-thread reduction runs along one thread axis (fuse them first)"
            )

    def kind_of(self, iv: IterVar) -> LoopKind:
        attr = self.stage.iter_attrs.get(iv)
        return attr.kind if attr else LoopKind.SERIAL

    # -- the recursive walk over leaf loops ---------------------------------------------------
    def build(self, level: int, env: Env) -> Stmt:
        if level < len(self.leaves) and (
            intrin := tensorize.intrin_at(self.stage, self.leaves[level])
        ):
            return tensorize.emit(self, level, env, intrin)
        if level == len(self.leaves):
            return self.cross_thread_update(env) if self.thread_reduce else self.update(env)
        iv = self.leaves[level]
        if (
            self.thread_reduce
            and iv.kind is IterKind.REDUCE
            and self.kind_of(iv) is not LoopKind.THREAD_BINDING
        ):
            return self.build(level + 1, env)  # serial reduction loops run inside, per thread
        if (
            self.reduce_body is not None
            and iv.kind is IterKind.REDUCE
            and not env.init_done
            and not self.thread_reduce
        ):
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
        rel, tail = peel
        peeled = env.peeled | {id(rel)}
        main_env = replace(env, peeled=peeled)
        tail_env = replace(
            env, peeled=peeled, overrides={**env.overrides, tail.inner: tail.remainder}
        )
        main = self.make_for(iv, const(0), tail.full, lambda: self.body_at(level, main_env))
        last = self.make_for(
            iv, tail.full, const(1), lambda: self.body_at(level, tail_env), tail=True
        )
        return seq(main, last)

    def body_at(self, level: int, env: Env) -> Stmt:
        """The inside of loop `level`: stages attached there, then the deeper loops."""
        iv = self.leaves[level]
        inner = self.build(level + 1, env)
        children = self.b.attached.get(id(iv), [])
        prefetches = self.prefetches_at(level, env)
        if not children:
            return seq(*prefetches, inner)
        nests = [self.b.stage_nest(child) for child in children]
        body = seq(*prefetches, *nests, inner)
        for child in reversed(children):
            body = self.b.realize_of(child, body)
        return body

    def prefetches_at(self, level: int, env: Env) -> list[Stmt]:
        """The stage's `prefetch`es at loop `level`: what iteration (var + offset) will read."""
        iv = self.leaves[level]
        sch = self.stage.schedule
        wanted = [  # a tensor computed inside some loop nest has no fixed home to fetch from
            (t, off)
            for t, axis, off in self.stage.prefetches
            if axis is iv and (t.op not in sch or sch[t.op].attach_type == "root")
        ]
        writes = [
            (consumer.op.output(0), off)
            for consumer, axis, off in self.stage.write_prefetches
            if axis is iv and consumer.attach_type == "root"
        ]
        if not wanted and not writes:
            return []
        roots, _ = self.root_values(env)
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
        relax = {
            leaf.var: Interval(const(0, leaf.var.dtype), simplify_expr(extents[leaf] - 1))
            for leaf in self.leaves[level + 1 :]
        }
        out: list[Stmt] = []
        roots_of = {axis.var: value for axis, value in roots.items()}
        for tensor, offset in wanted:
            out += prefetch_nest(
                self.b.buffer_of,
                tensor,
                self.info.body,
                roots_of,
                {iv.var: iv.var + offset},
                relax,
                dict(self.b.ranges),
            )
        # the consumer writes its output at this stage's own indices (checked by Stage.prefetch)
        own = tuple(axis.var for axis in self.stage.op.axis)
        for tensor, offset in writes:
            out += prefetch_nest(
                self.b.buffer_of,
                tensor,
                (tensor[own],),
                roots_of,
                {iv.var: iv.var + offset},
                relax,
                dict(self.b.ranges),
                write=True,
            )
        return out

    def make_for(
        self, iv: IterVar, lo: Expr, extent: Expr, body: Callable[[], Stmt], tail=False
    ) -> Stmt:
        # the bounds are of the loop variable's type (an int64 axis split into a constant inner
        # extent): int32 ones made `inner + outer` an int32 sum of an int64 variable
        lo, extent = widen(lo, iv.var.dtype), widen(simplify_expr(extent), iv.var.dtype)
        attr = self.stage.iter_attrs.get(iv)
        kind = attr.kind if attr else LoopKind.SERIAL
        tag = attr.thread.thread_tag if attr and attr.thread is not None else ""
        pragmas = tuple(attr.pragmas) if attr else ()
        if kind is LoopKind.VECTORIZED and not isinstance(extent, Const):
            kind = LoopKind.SERIAL  # a symbolic tail: the main loop stays vectorized
        if tail and kind is LoopKind.PARALLEL:
            kind = LoopKind.SERIAL  # a single iteration
        if kind is LoopKind.THREAD_BINDING and tag == "vthread":  # each one its own: no reuse
            return For(iv.var, lo, extent, self.b.with_range(iv.var, lo, extent, body), kind, tag)
        if kind is LoopKind.THREAD_BINDING and tag in self.b.bound_tags:
            return self.reuse_thread(iv, tag, extent, body)
        if kind is LoopKind.THREAD_BINDING:
            self.b.bound_tags[tag] = (iv.var, extent)
            try:
                stmt = self.b.with_range(iv.var, lo, extent, body)
            finally:
                del self.b.bound_tags[tag]
            return For(iv.var, lo, extent, stmt, kind, tag, pragmas)
        stmt = self.b.with_range(iv.var, lo, extent, body)
        if isinstance(extent, Const) and extent.value <= 0:
            return seq()
        return For(iv.var, lo, extent, stmt, kind, tag, pragmas)

    def reuse_thread(self, iv: IterVar, tag: str, extent: Expr, body: Callable[[], Stmt]) -> Stmt:
        """A loop bound to a GPU index that an enclosing loop already binds: it *is* that index.

        (A cache filled cooperatively inside a thread-bound loop binds the same threadIdx.) Threads
        beyond this loop's extent sit out; more iterations than threads is an error.
        """
        outer_var, outer_extent = self.b.bound_tags[tag]
        if (
            isinstance(extent, Const)
            and isinstance(outer_extent, Const)
            and extent.value > outer_extent.value
        ):
            raise ScheduleError(
                f"bind: axis '{iv.name}' of stage '{self.stage.name}' needs {extent.value} threads along "
                f"{tag}, but it is computed inside a loop that launches only {outer_extent.value}"
            )
        stmt = self.b.with_range(iv.var, const(0), extent, body)
        if not (
            isinstance(extent, Const)
            and isinstance(outer_extent, Const)
            and extent.value == outer_extent.value
        ):
            stmt = IfThenElse(LT(iv.var, extent), stmt)
        return LetStmt(iv.var, outer_var, stmt)

    def peelable_split(self, level: int, env: Env, extents: dict) -> tuple[Relation, Tail] | None:
        """The relation whose outer loop is this leaf and whose tail should become its own loop."""
        iv = self.leaves[level]
        for rel in self.stage.relations:
            if id(rel) in env.peeled:
                continue
            tail = rel.tail_of(iv, extents)
            if tail is None:
                continue
            if self.has_thread_binding():
                return None  # GPU kernels guard: a peeled copy of a bound loop would be a second launch
            deeper = self.leaves[level + 1 :]
            if not all(d in deeper for d in leaf_descendants(self.stage, tail.inner)):
                return None  # the inner loop does not sit inside the outer one: guard
            if any(self.b.attached.get(id(d)) for d in self.leaves[level:]) and (
                splits_depend_on_extent_of(self.stage, tail.inner)
            ):
                # the tail would decompose a fused (or nparts-split) loop differently from the
                # main loop, while the regions of the stages attached inside are inferred once
                return None
            return rel, tail
        return None

    def has_thread_binding(self) -> bool:
        return any(self.kind_of(iv) is LoopKind.THREAD_BINDING for iv in self.leaves)

    # -- the innermost statements --------------------------------------------------------------
    def root_values(self, env: Env) -> tuple[dict[IterVar, Expr], dict[IterVar, Expr]]:
        """(absolute index of each root axis, value of every iter var), from the leaf loop vars."""
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
        values = iter_values(self.stage, extents, {iv: iv.var for iv in self.leaves})
        op = self.stage.op
        roots = {
            iv: simplify_expr(self.info.mins[iv] + values[iv])
            for iv in list(op.axis) + list(op.reduce_axis)
        }
        return roots, values

    def predicates(self, env: Env, values: dict, spatial_only: bool) -> list[Expr]:
        """Conditions that keep non-divisible splits and clamped regions inside their domains."""
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)
        preds: list[Expr] = []
        for rel in self.stage.relations:
            if id(rel) in env.peeled:
                continue
            if spatial_only and any(v.kind is IterKind.REDUCE for v in rel.sources):
                continue
            preds += rel.guards(values, extents)
        for d, iv in enumerate(self.stage.op.axis):
            if d in self.info.guard_axes:
                index = self.info.mins[iv] + values[iv]
                preds.append(GE(index, const(0, index.dtype)))
                preds.append(LT(index, widen(iv.dom.extent, index.dtype)))  # int64 index
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
        roots, values = self.root_values(env)
        to_abs = {iv.var: e for iv, e in roots.items()}
        index = tuple(roots[iv] for iv in self.stage.op.axis)
        preds = self.predicates(env, values, spatial_only=False)
        buffers = self.output_buffers()
        if self.reduce_body is None:
            stores = [
                BufferStore(
                    buf, index, self.b.loads(simplify_expr(substitute(body, to_abs), data=True))
                )
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

    def cross_thread_update(self, env: Env) -> Stmt:
        """Each thread reduces its share serially, then the block combines across `thread_reduce`.

        acc = identity; for serial reduction loops: acc = combine(acc, value);
        ThreadAllReduce(acc) -> red; the first thread stores red into the output.
        """
        red = self.reduce_body
        roots, values = self.root_values(env)
        to_abs = {iv.var: e for iv, e in roots.items()}
        index = tuple(roots[iv] for iv in self.stage.op.axis)
        buffers = self.output_buffers()
        accs = [Buffer(f"{b.name}.acc", (const(1),), b.dtype, "local") for b in buffers]
        results = [Buffer(f"{b.name}.red", (const(1),), b.dtype, "local") for b in buffers]
        zero = (const(0),)
        init = seq(*[BufferStore(a, zero, ident) for a, ident in zip(accs, red.combiner.identity)])
        sources = tuple(self.b.loads(substitute(src, to_abs)) for src in red.source)
        current = tuple(BufferLoad(a, zero) for a in accs)
        combined = red.combiner.combine(current, sources)
        temps = [Var(f"{a.name}_new", a.dtype) for a in accs]
        update: Stmt = seq(*[BufferStore(a, zero, t) for a, t in zip(accs, temps)])
        for t, value in reversed(list(zip(temps, combined))):
            update = LetStmt(t, value, update)
        condition = simplify_expr(self.b.loads(substitute(red.condition, to_abs)))
        preds = self.predicates(env, values, spatial_only=False)
        if not (isinstance(condition, Const) and condition.value):
            preds = preds + [condition]
        update = self.guarded(preds, update)
        serial = [
            iv for iv in self.leaves if iv.kind is IterKind.REDUCE and iv not in self.thread_reduce
        ]
        extents = iter_extents(self.stage, self.info.root_extents, env.overrides)

        def nest(k: int) -> Stmt:
            if k == len(serial):
                return update
            return self.make_for(serial[k], const(0), extents[serial[k]], lambda: nest(k + 1))

        thread_iv = self.thread_reduce[0]
        tag = self.stage.iter_attrs[thread_iv].thread.thread_tag
        extent = simplify_expr(extents[thread_iv])
        if not isinstance(extent, Const):
            raise ScheduleError(
                f"bind: reduction axis '{thread_iv.name}' of stage '{self.stage.name}' is bound to "
                f"{tag} with non-constant extent {extent}; split it by a constant first"
            )
        allreduce = ThreadAllReduce(
            red.combiner,
            tuple(BufferLoad(a, zero) for a in accs),
            tuple(results),
            tag,
            extent.value,
        )
        first = EQ(thread_iv.var, const(0, thread_iv.var.dtype))
        spatial = self.predicates(env, values, spatial_only=True)
        store = self.guarded(
            [first] + spatial,
            seq(*[BufferStore(b, index, BufferLoad(r, zero)) for b, r in zip(buffers, results)]),
        )
        body = seq(init, nest(0), allreduce, store)
        for buf in reversed(accs + results):
            body = Allocate(buf, const(1), body)
        return body

    def init_nest(self, level: int, env: Env) -> Stmt:
        """Identity stores over the spatial leaf loops from `level` inwards."""
        spatial = [iv for iv in self.leaves[level:] if iv.kind is not IterKind.REDUCE]

        def nest(k: int) -> Stmt:
            if k < len(spatial) and (intrin := tensorize.intrin_at(self.stage, spatial[k])):
                # a tensorized tile is initialized by its intrinsic's reset (accumulator fragments)
                return tensorize.emit(self, self.leaves.index(spatial[k]), env, intrin, reset=True)
            if k == len(spatial):
                roots, values = self.root_values(env)
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
