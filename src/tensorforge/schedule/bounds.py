"""Bound inference: the region of each stage that must be computed where it is attached.

Stages are visited consumers first. An output or root stage computes its whole domain. A stage
computed at loop `ivar` of `parent` computes, for each dimension, the hull of the indices its
consumers read while every loop nested inside `ivar` runs over its range; the loops enclosing
`ivar` stay symbolic, so the region moves with them (e.g. `[io*32, io*32 + 32)`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorforge.errors import ScheduleError
from tensorforge.ir.arith import Interval, prove, simplify_expr, symbolic_bounds
from tensorforge.schedule import opaque_ops
from tensorforge.schedule.iter_math import iter_extents, iter_values
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.stage import Stage
from tensorforge.te.expr import GE, LT, Const, Expr, Max, Min, TensorRead, Var, const
from tensorforge.te.substitute import substitute
from tensorforge.te.tensor import IterVar
from tensorforge.te.visit import walk


@dataclass
class StageBounds:
    """What lowering needs to know about one computed stage."""

    stage: Stage
    body: tuple[Expr, ...]  # the op's expressions with inlined stages substituted
    mins: dict[IterVar, Expr] = field(default_factory=dict)  # root axis -> region min
    extents: dict[IterVar, Expr] = field(default_factory=dict)  # every iter var -> extent
    guard_axes: set = field(default_factory=set)  # data axes whose region may leave the domain

    @property
    def root_extents(self) -> dict[IterVar, Expr]:
        op = self.stage.op
        return {iv: self.extents[iv] for iv in list(op.axis) + list(op.reduce_axis)}


def enclosing_loop_vars(stage: Stage) -> list[Var]:
    """Loop variables enclosing the place where `stage` is computed, outermost first."""
    if stage.attach_type != "scope":
        return []
    parent = stage.attach_stage
    leaves = parent.leaf_iter_vars
    position = leaves.index(stage.attach_ivar)
    return enclosing_loop_vars(parent) + [iv.var for iv in leaves[: position + 1]]


def enclosing_thread_tags(stage: Stage) -> list[str]:
    """GPU indices bound by the loops enclosing `stage`'s attach point."""
    tags = []
    current = stage
    while current.attach_type == "scope":
        parent = current.attach_stage
        leaves = parent.leaf_iter_vars
        for iv in leaves[: leaves.index(current.attach_ivar) + 1]:
            attr = parent.iter_attrs.get(iv)
            if attr is not None and attr.thread is not None:
                tags.append(attr.thread.thread_tag)
        current = parent
    return tags


def fixed_loop_vars(stage: Stage, scope: str) -> set[int]:
    """ids of the enclosing loop vars that stay symbolic in `stage`'s region.

    A "shared" buffer is filled cooperatively by a whole GPU block, so the threadIdx loops around
    it are relaxed (the region covers every thread's needs); a "global" one by the whole grid, so
    blockIdx loops are relaxed too. "local" storage is per thread: everything stays fixed.
    """
    relaxed_prefixes = {
        "shared": ("threadIdx", "vthread"),
        "global": ("threadIdx", "blockIdx"),
    }.get(scope, ())
    bound = {}
    current = stage
    while current.attach_type == "scope":
        parent = current.attach_stage
        for iv, attr in parent.iter_attrs.items():
            if attr.thread is not None:
                bound[id(iv.var)] = attr.thread.thread_tag
        current = parent
    return {
        id(v)
        for v in enclosing_loop_vars(stage)
        if not bound.get(id(v), "").startswith(relaxed_prefixes) or not relaxed_prefixes
    }


def infer_bounds(
    sch: Schedule, bodies: dict[int, tuple[Expr, ...]], scopes: dict[int, str]
) -> dict[int, StageBounds]:
    """Bounds of every computed (non-inlined compute) stage, keyed by id(stage), given each op's
    expressions with inlined stages substituted (`bodies`, by id(op)) and each stage's memory
    scope (`scopes`, by id(stage): it decides which GPU loops a region is relaxed over)."""
    result: dict[int, StageBounds] = {}
    loop_extent: dict[int, tuple[Var, Expr]] = {}  # id(var) -> (var, extent) of consumers' loops
    computed = [s for s in sch.stages if opaque_ops.is_computed(s)]
    for stage in reversed(computed):
        info = StageBounds(stage, bodies.get(id(stage.op), ()))
        op = stage.op
        if stage.attach_type == "scope":
            fixed = fixed_loop_vars(stage, scopes[id(stage)])
            region = _needed_region(sch, stage, result, bodies, loop_extent, fixed)
        else:
            region = opaque_ops.root_region(sch, stage)  # the whole domain (a scan: one row)
        for iv, (lo, extent) in zip(op.axis, region):
            info.mins[iv] = lo
            info.extents[iv] = extent
        for iv in op.reduce_axis:
            info.mins[iv] = iv.dom.min
            info.extents[iv] = iv.dom.extent
        info.extents = iter_extents(stage, info.root_extents)
        if stage.attach_type == "scope":
            info.guard_axes = _axes_needing_guard(info, loop_extent)
        for iv in stage.leaf_iter_vars:
            loop_extent[id(iv.var)] = (iv.var, info.extents[iv])
        result[id(stage)] = info
    return result


def root_values_in_leaves(info: StageBounds) -> dict[IterVar, Expr]:
    """Each root axis of the stage as an expression of its leaf loop vars (absolute index)."""
    stage = info.stage
    values = iter_values(stage, info.extents, {iv: iv.var for iv in stage.leaf_iter_vars})
    op = stage.op
    return {iv: info.mins[iv] + values[iv] for iv in list(op.axis) + list(op.reduce_axis)}


def _needed_region(
    sch: Schedule,
    stage: Stage,
    done: dict[int, StageBounds],
    bodies: dict[int, tuple[Expr, ...]],
    loop_extent: dict[int, tuple[Var, Expr]],
    fixed: set[int],
) -> list[tuple[Expr, Expr]]:
    """The region of `stage` its consumers read inside the loop it is attached at: (min, extent)
    per data axis, symbolic in the enclosing loops whose ids are in `fixed`."""
    parent = stage.attach_stage
    ndim = len(stage.op.axis)
    lows: list[list[Expr]] = [[] for _ in range(ndim)]
    highs: list[list[Expr]] = [[] for _ in range(ndim)]
    for consumer in sch.consumers_of(stage):
        if not sch.is_inside(consumer, parent):
            raise ScheduleError(
                f"compute_at: '{stage.name}' is computed inside '{parent.name}' (at "
                f"'{stage.attach_ivar.name}') but is also read by '{consumer.name}', which is not "
                f"computed there; compute '{consumer.name}' inside '{parent.name}' too, or keep "
                f"'{stage.name}' at root"
            )
        _check_consumer_is_inside_the_attach_loop(stage, consumer)
        cinfo = done[id(consumer)]
        to_leaves = {iv.var: e for iv, e in root_values_in_leaves(cinfo).items()}
        for read in _reads_of(bodies[id(consumer.op)], stage):
            indices = [substitute(i, to_leaves) for i in read.indices]
            relax: dict[Var, Interval] = {}
            known: dict[Var, Interval] = {}  # ranges of the fixed loops: they fold % and //
            for index in indices:
                for n in walk(index):
                    if isinstance(n, Var) and id(n) in loop_extent:
                        var, extent = loop_extent[id(n)]
                        target = known if id(n) in fixed else relax
                        target[var] = _loop_range(var, extent)
            for d, index in enumerate(indices):
                bound = symbolic_bounds(simplify_expr(index, {**known, **relax}), relax, known)
                bound = _relax_leftover_loops(bound, loop_extent, fixed, known)
                if bound.min is None or bound.max is None:
                    # e.g. an index that divides by a symbolic extent (fused or nparts-split
                    # loops): as TVM does, fall back to the whole dimension, which is always right
                    dom = stage.op.axis[d].dom
                    bound = Interval(dom.min, simplify_expr(dom.min + dom.extent - 1))
                lows[d].append(bound.min)
                highs[d].append(bound.max)
    region = []
    for d, iv in enumerate(stage.op.axis):
        lo = _hull(lows[d], Min)
        hi = _hull(highs[d], Max)
        extent = simplify_expr(hi - lo + 1)
        if not isinstance(extent, Const):
            # a moving, clamped window (e.g. min(...) - max(...)) still fits the full domain;
            # the window then starts inside the domain, or it could miss points the consumer
            # reads (a region relaxed over guarded-off iterations can start before the domain)
            extent = simplify_expr(Min(extent, iv.dom.extent))
            lo = Max(lo, iv.dom.min)
        else:
            # e.g. k blocks of kc relaxed over a guarded tail (1030 -> 5 x 256 = 1280): only the
            # domain is ever read, so the buffer need not hold the rest
            lo, extent = _within_domain(simplify_expr(lo), extent, iv)
        region.append((simplify_expr(lo), extent))
    return region


def _within_domain(lo: Expr, extent: Expr, iv) -> tuple[Expr, Expr]:
    """A constant window [lo, lo + extent) cut to the axis' constant domain where it overlaps
    it; any other window as it is."""
    dom_min, dom_extent = simplify_expr(iv.dom.min), simplify_expr(iv.dom.extent)
    if not all(isinstance(e, Const) for e in (lo, extent, dom_min, dom_extent)):
        return lo, extent
    start = max(int(lo.value), int(dom_min.value))
    end = min(int(lo.value) + int(extent.value), int(dom_min.value) + int(dom_extent.value))
    if end <= start:  # no overlap: leave it for whatever reports the bad read
        return lo, extent
    return const(start, lo.dtype), const(end - start, extent.dtype)


def _loop_range(var: Var, extent: Expr) -> Interval:
    """The values a loop variable over `extent` iterations takes."""
    return Interval(const(0, var.dtype), simplify_expr(extent - 1))


def _relax_leftover_loops(
    bound: Interval, loop_extent: dict[int, tuple[Var, Expr]], fixed: set[int], known: dict
) -> Interval:
    """Relax loops that entered `bound` through another loop's extent.

    A consumer's loop can have an extent that depends on a loop it is nested in (a region
    computed at a deeper loop, clamped to its domain). Relaxing the consumer's loop then brings
    in that outer loop, which must be relaxed too unless it encloses the stage itself; left in
    place, the region would name a loop the stage is not inside (a fuzzer find).
    """
    for _ in range(8):  # each round removes one level of nesting
        if bound.min is None or bound.max is None:
            return bound
        leftover = {
            id(n): n
            for e in (bound.min, bound.max)
            for n in walk(e)
            if isinstance(n, Var) and id(n) in loop_extent and id(n) not in fixed
        }
        if not leftover:
            return bound
        relax = {var: _loop_range(var, loop_extent[key][1]) for key, var in leftover.items()}
        low = symbolic_bounds(simplify_expr(bound.min, {**known, **relax}), relax, known).min
        high = symbolic_bounds(simplify_expr(bound.max, {**known, **relax}), relax, known).max
        bound = Interval(low, high)
    return Interval(None, None)


def _check_consumer_is_inside_the_attach_loop(stage: Stage, consumer: Stage) -> None:
    """A consumer computed in the same parent must run inside the loop `stage` is attached at."""
    parent, outer = stage.attach_stage, consumer
    while outer is not parent and outer.attach_stage is not parent:
        outer = outer.attach_stage
    if outer is parent:
        return
    leaves = parent.leaf_iter_vars
    if stage.attach_ivar not in leaves or outer.attach_ivar not in leaves:
        return
    if leaves.index(outer.attach_ivar) < leaves.index(stage.attach_ivar):
        raise ScheduleError(
            f"compute_at: '{stage.name}' is computed at '{stage.attach_ivar.name}' of "
            f"'{parent.name}', but '{consumer.name}' reads it from the outer loop "
            f"'{outer.attach_ivar.name}'; attach '{stage.name}' at "
            f"'{outer.attach_ivar.name}' or outside it"
        )


def _axes_needing_guard(info: StageBounds, loop_extent: dict[int, tuple[Var, Expr]]) -> set[int]:
    """Data axes along which the stage must skip points outside its op's domain.

    A region inferred from a tile can stick out of the domain (the last tile of a non-divisible
    split). Computing those extra points is harmless when nothing they read leaves its tensor
    (e.g. reads of a zero-padded packed buffer): the results land in the stage's own buffer and
    no consumer reads them. A guard is kept only for axes where a read might go out of bounds,
    so the hot loop of a padded tile stays unmasked.
    """
    op = info.stage.op
    known = {var: _loop_range(var, ext) for var, ext in loop_extent.values()}
    region = {
        iv.var: Interval(info.mins[iv], simplify_expr(info.mins[iv] + info.extents[iv] - 1))
        for iv in list(op.axis) + list(op.reduce_axis)
    }
    reads = [n for e in info.body for n in walk(e) if isinstance(n, TensorRead)]
    needed: set[int] = set()
    for d, iv in enumerate(op.axis):
        lo, hi = region[iv.var].min, region[iv.var].max
        if prove(GE(lo, const(0, lo.dtype)), known) and prove(LT(hi, iv.dom.extent), known):
            continue  # the region stays inside the domain along this axis
        for read in reads:
            if not any(n is iv.var for index in read.indices for n in walk(index)):
                continue
            for index, extent in zip(read.indices, read.tensor.shape):
                bound = symbolic_bounds(index, region, known)
                inside = (
                    bound.min is not None
                    and bound.max is not None
                    and prove(GE(bound.min, const(0, bound.min.dtype)), known)
                    and prove(LT(bound.max, extent), known)
                )
                if not inside:
                    needed.add(d)
    return needed


def _hull(bounds: list[Expr], combine: type) -> Expr:
    out = bounds[0]
    for b in bounds[1:]:
        out = simplify_expr(combine(out, b))
    return out


def _reads_of(body: tuple[Expr, ...], stage: Stage) -> list[TensorRead]:
    return [
        n for e in body for n in walk(e) if isinstance(n, TensorRead) and n.tensor.op is stage.op
    ]
