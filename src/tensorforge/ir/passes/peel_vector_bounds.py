"""Peel the first and last iterations of a loop whose vectors are clamped or masked only there.

A pool's window columns, vectorized, read `X[max(ramp(16j - 1, 2, 8), broadcast(0))]` and
test `ramp(16j - 1, 2, 8) >= broadcast(0)`: some lane reaches the padding only for j = 0 (and
the last j, at the right edge). Every other iteration pays a gather and masked accesses for
nothing. Peeled, the loop runs j = 0, j in [1, n - 1) and j = n - 1 as three loops, and the
simplifier, under each one's range, turns the middle one's clamps back into strided loads and
its masks into none. As TVM's LoopPartition, for the bounds of ramps only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorforge.ir.arith import Interval, simplify_expr
from tensorforge.ir.arith.lanes import lane_bound
from tensorforge.ir.passes.simplify import simplify
from tensorforge.ir.stmt import For, LoopKind, Seq, Stmt
from tensorforge.ir.visit import map_children, walk
from tensorforge.te.expr import GE, Add, Const, Expr, Var

MAX_PEEL = 2  # iterations peeled at either end (a window's padding reaches one vector)


def peel_vector_bounds(stmt: Stmt) -> Stmt:
    """Runs on simplified IR (canonical ramps); simplifies again where it peeled."""
    peeled = _peel(stmt, {})
    return stmt if peeled is stmt else simplify(peeled)


def _peel(stmt: Any, ranges: dict[Var, Interval]) -> Any:
    if not isinstance(stmt, For):
        return map_children(stmt, lambda child: _peel(child, ranges))
    if not (isinstance(stmt.min, Const) and isinstance(stmt.extent, Const)):
        last = _peel_last(stmt, ranges) if stmt.kind is LoopKind.SERIAL else None
        if last is not None:
            return last
        inner = {**ranges, stmt.var: Interval.from_range(stmt.min, stmt.extent)}
        body = _peel(stmt.body, inner)
        return stmt if body is stmt.body else dataclasses.replace(stmt, body=body)
    start, extent = int(stmt.min.value), int(stmt.extent.value)
    pieces = _pieces(stmt, start, extent, ranges) if stmt.kind is LoopKind.SERIAL else None
    if pieces is None:
        body = _peel(stmt.body, {**ranges, stmt.var: Interval.from_range(start, extent)})
        return stmt if body is stmt.body else dataclasses.replace(stmt, body=body)
    loops = []
    for lo, hi in pieces:
        inner = {**ranges, stmt.var: Interval.from_range(lo, hi - lo)}
        loops.append(
            dataclasses.replace(
                stmt,
                min=Const(lo, stmt.min.dtype),
                extent=Const(hi - lo, stmt.extent.dtype),
                body=_peel(stmt.body, inner),
            )
        )
    return Seq(tuple(loops))


def _peel_last(loop: For, ranges: dict) -> Stmt | None:
    """A loop of a run-time extent (a row of `n` elements in vectors: `(n + 15) // 16`
    steps) whose lane tests fail in its last iteration only, as two loops: every iteration
    but the last, where the simplifier then drops the tests, and the last; None where it does
    not apply. NOTE: the loop must provably run at least once (`n >= 1`: a size_var's fact),
    or the peeled last iteration would run where the loop runs none."""
    conditions = [c for c in _lane_bounds(loop.body) if any(n is loop.var for n in walk(c))]
    if not conditions:
        return None
    once = simplify_expr(GE(loop.extent, Const(1, loop.extent.dtype)), ranges)
    if not (isinstance(once, Const) and once.value):
        return None
    but_last = simplify_expr(Add(loop.extent, Const(-1, loop.extent.dtype)), ranges)
    first = {**ranges, loop.var: Interval.from_range(loop.min, but_last)}
    if not any(_holds(c, first) for c in conditions):
        return None
    last_min = simplify_expr(Add(loop.min, but_last), ranges)
    main = dataclasses.replace(loop, extent=but_last, body=_peel(loop.body, {**ranges, **first}))
    inner = {**ranges, loop.var: Interval.point(last_min)}
    last = dataclasses.replace(
        loop, min=last_min, extent=Const(1, loop.extent.dtype), body=_peel(loop.body, inner)
    )
    return Seq((main, last))


def _pieces(loop: For, start: int, extent: int, ranges: dict) -> list[tuple[int, int]] | None:
    """[lo, hi) ranges of `loop` with its bounds tests peeled off, or None (nothing to peel)."""
    if extent < 3:
        return None
    conditions = [c for c in _lane_bounds(loop.body) if any(n is loop.var for n in walk(c))]
    if not conditions:
        return None

    def all_hold(lo: int, hi: int, tests: list[Expr]) -> bool:
        scope = {**ranges, loop.var: Interval.from_range(lo, hi - lo)}
        return all(_holds(c, scope) for c in tests)

    end = start + extent
    # a test that fails inside the loop too (a lane mask of an inner split) stays as it is
    middle = (start + MAX_PEEL, end - MAX_PEEL)
    # a test that holds everywhere already is the simplifier's to drop
    conditions = [
        c
        for c in conditions
        if (middle[0] >= middle[1] or all_hold(*middle, [c])) and not all_hold(start, end, [c])
    ]
    if not conditions:
        return None
    for low in range(MAX_PEEL + 1):
        for high in range(MAX_PEEL + 1):
            if (
                (low or high)
                and low + high < extent
                and all_hold(start + low, end - high, conditions)
            ):
                cuts = [start, start + low, end - high, end]
                return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    return None


def _holds(condition: Expr, ranges: dict) -> bool:
    folded = simplify_expr(condition, ranges)
    return isinstance(folded, Const) and bool(folded.value)


def _lane_bounds(stmt: Stmt) -> list[Expr]:
    """For each clamp or test of a ramp against a broadcast, the scalar condition under which it
    clamps no lane / holds in every lane (lanes.lane_bound)."""
    return [c for c in map(lane_bound, walk(stmt)) if c is not None]
