"""The simplify pass: simplify every expression under the ranges of its enclosing loops, and
drop the structure that leaves dead (empty loops, decided branches, empty sequences)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorforge.ir.arith.interval import Interval
from tensorforge.ir.arith.linear import is_index_dtype, same_expr
from tensorforge.ir.arith.simplifier import ExprSimplifier
from tensorforge.ir.expr import Broadcast, BufferLoad
from tensorforge.ir.stmt import (
    Allocate,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Seq,
    Stmt,
)
from tensorforge.ir.visit import map_children, rewrite, substitute
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, Not, Var

_EMPTY = Seq(())
_KEEP_SINGLE_ITERATION = (LoopKind.PARALLEL, LoopKind.THREAD_BINDING)


def simplify(stmt: Stmt) -> Stmt:
    """Fold and canonicalize expressions knowing loop ranges, and drop what is dead.

    `i*4 + j - i*4` -> `j`; `for i in range(0)` -> nothing; `for i in range(m, m + 1): s` ->
    `s[i := m]`; `if io*32 + ii < 1000` -> its body when the loops make it true; nested `Seq`s
    flatten. Unchanged subtrees come back as the same objects.
    """
    return _simplify_stmt(stmt, _Scope({}))


class _Scope:
    """The ranges of the loop vars (and let vars) in scope, with one simplifier for them."""

    def __init__(self, ranges: dict[Var, Interval]):
        self.ranges = ranges
        self._simplifier: ExprSimplifier | None = None
        self._data: ExprSimplifier | None = None

    @property
    def simplifier(self) -> ExprSimplifier:
        if self._simplifier is None:
            self._simplifier = ExprSimplifier(self.ranges)
        return self._simplifier

    def expr(self, e: Expr) -> Expr:
        return self.simplifier.visit(e)

    def value(self, e: Expr) -> Expr:
        """A stored value: its integer arithmetic of loaded values wraps around (torch's does)."""
        if self._data is None:
            self._data = ExprSimplifier(self.ranges, data=True)
            self._data._index = self.simplifier
            self._data.analyzer = self.simplifier.analyzer
        return self._data.visit(e)

    def within(self, var: Var, interval: Interval) -> _Scope:
        return _Scope({**self.ranges, var: interval})

    def visit(self, node: Any) -> Any:
        """A child of a statement: an expression or a statement."""
        return self.expr(node) if isinstance(node, Expr) else _simplify_stmt(node, self)


def _is_empty(s: Stmt | None) -> bool:
    return isinstance(s, Seq) and not s.stmts


def _replace(node: Any, **fields: Any) -> Any:
    """`node` with `fields`, or `node` itself when every field is already that object."""
    if all(getattr(node, name) is value for name, value in fields.items()):
        return node
    return dataclasses.replace(node, **fields)


def _simplify_stmt(s: Stmt, scope: _Scope) -> Stmt:
    match s:
        case For(var=var, min=low, extent=extent, body=body, kind=kind):
            low, extent = scope.expr(low), scope.expr(extent)
            if scope.simplifier.analyzer.bounds(extent)[1] <= 0:
                return _EMPTY  # for i in range(0): ... -> nothing
            once = isinstance(extent, Const) and extent.value == 1
            if once and kind not in _KEEP_SINGLE_ITERATION:  # one iteration: body[i := min]
                return _simplify_stmt(substitute(body, {var: low}), scope)
            body = _simplify_stmt(body, scope.within(var, Interval.from_range(low, extent)))
            if _is_empty(body) and kind is not LoopKind.THREAD_BINDING:
                return _EMPTY  # for i in range(n): pass -> nothing
            return _replace(s, min=low, extent=extent, body=body)
        case LetStmt(var=var, value=value, body=body):
            value = scope.expr(value)
            if isinstance(value, (Const, Var)):
                return _simplify_stmt(substitute(body, {var: value}), scope)  # let x = 3 -> x := 3
            inner = scope.within(var, Interval.point(value)) if is_index_dtype(var.dtype) else scope
            body = _simplify_stmt(body, inner)
            return _EMPTY if _is_empty(body) else _replace(s, value=value, body=body)
        case IfThenElse(condition=cond, then_case=then_case, else_case=else_case):
            cond = scope.expr(cond)
            if isinstance(cond, Const):  # if True: a else: b -> a
                taken = then_case if cond.value else else_case
                return _EMPTY if taken is None else _simplify_stmt(taken, scope)
            then_case = _simplify_stmt(then_case, scope)
            if else_case is not None:
                else_case = _simplify_stmt(else_case, scope)
                if _is_empty(else_case):
                    else_case = None
            if _is_empty(then_case):  # if c: pass else: b -> if not c: b
                if else_case is None:
                    return _EMPTY
                return IfThenElse(scope.expr(Not(cond)), else_case)
            return _replace(s, condition=cond, then_case=then_case, else_case=else_case)
        case Seq(stmts=stmts):
            return _flatten(s, [_simplify_stmt(x, scope) for x in stmts])
        case BufferStore(indices=indices, value=value, predicate=predicate):
            simpler = tuple(scope.expr(i) for i in indices)
            s = _replace(
                s,
                indices=indices if all(a is b for a, b in zip(simpler, indices)) else simpler,
                value=scope.value(value),
                predicate=None if predicate is None else scope.expr(predicate),
            )
            if isinstance(s.predicate, Const) and dt.lanes_of(s.predicate.dtype) == 1:
                # A[i] = x if True -> A[i] = x; A[i] = x if False -> nothing
                return _replace(s, predicate=None) if s.predicate.value else _EMPTY
            match s.predicate:
                case Broadcast(value=Const(value=on)):  # every lane on (off): no mask (no store)
                    return _replace(s, predicate=None) if on else _EMPTY
                case Broadcast(value=uniform) as mask:
                    # A[v] = B[w if broadcast(c)] if broadcast(c) -> if c: A[v] = B[w]: one
                    # branch on a scalar, not masked accesses (a pool's padding row)
                    value = rewrite(s.value, lambda e: _unmasked_under(e, mask))
                    return IfThenElse(uniform, _replace(s, value=value, predicate=None))
            return s
        case Evaluate(value=value):
            value = scope.expr(value)
            return _EMPTY if isinstance(value, Const) else _replace(s, value=value)
        case Allocate():
            s = map_children(s, scope.visit)
            return _EMPTY if _is_empty(s.body) else s  # storage nobody uses
    return map_children(s, scope.visit)  # Attr, Realize, Sync, ...: ranges pass through


def _unmasked_under(e: Any, mask: Broadcast) -> Any:
    """A load masked by `mask` itself, inside a branch taken only where `mask` holds: unmasked."""
    if isinstance(e, BufferLoad) and e.predicate is not None and same_expr(e.predicate, mask):
        return dataclasses.replace(e, predicate=None)
    return None


def _flatten(s: Seq, stmts: list[Stmt]) -> Stmt:
    """Seq(a, Seq(b, c), Seq()) -> Seq(a, b, c); a single statement stands alone."""
    flat: list[Stmt] = []
    for x in stmts:
        flat.extend(x.stmts if isinstance(x, Seq) else (x,))
    if len(flat) == 1:
        return flat[0]
    if len(flat) == len(s.stmts) and all(a is b for a, b in zip(flat, s.stmts)):
        return s
    return Seq(tuple(flat))
