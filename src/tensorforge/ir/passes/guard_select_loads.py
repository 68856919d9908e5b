"""Loads inside one arm of a select happen only when that arm is taken.

`select(i >= 1, A[i - 1], 0.0)` must not read `A[-1]`: TVM's `if_then_else` evaluates one arm,
and padding is written exactly this way. Every load in the true arm gets the condition as its
predicate, every load in the false arm its negation, so the backend loads under a mask (a
branch for a scalar) instead of touching memory the user's condition excludes.
"""

from __future__ import annotations

from typing import Any

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.stmt import Stmt
from tensorforge.ir.visit import rewrite, walk
from tensorforge.te.expr import And, Expr, Not, Select


def guard_select_loads(stmt: Stmt) -> Stmt:
    return rewrite(stmt, _guard)


def _guard(node: Any) -> Any:
    if not isinstance(node, Select):
        return None
    if not any(
        isinstance(n, BufferLoad) for arm in (node.true_value, node.false_value) for n in walk(arm)
    ):
        return None
    true_value = _predicate_loads(node.true_value, node.condition)
    false_value = _predicate_loads(node.false_value, Not(node.condition))
    return Select(node.condition, true_value, false_value)


def _predicate_loads(arm: Expr, condition: Expr) -> Expr:
    def add(n: Any) -> Any:
        if isinstance(n, BufferLoad):
            mask = condition if n.predicate is None else And(n.predicate, condition)
            return BufferLoad(n.buffer, n.indices, mask)
        return None

    return rewrite(arm, add)
