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
from tensorforge.ir.visit import children, rewrite, walk
from tensorforge.te.expr import And, Expr, Not, Select, structural_key


def guard_select_loads(stmt: Stmt) -> Stmt:
    return rewrite(stmt, _guard)


def _guard(node: Any) -> Any:
    if not isinstance(node, Select):
        return None
    if not any(
        isinstance(n, BufferLoad) for arm in (node.true_value, node.false_value) for n in walk(arm)
    ):
        return None
    read = _unconditional_loads(node.condition)
    true_value = _predicate_loads(node.true_value, node.condition, read)
    false_value = _predicate_loads(node.false_value, Not(node.condition), read)
    return Select(node.condition, true_value, false_value)


def _predicate_loads(arm: Expr, condition: Expr, read: set) -> Expr:
    """`arm` with its loads predicated on `condition`, but for those of `read`: the condition
    reads the same element whichever arm is taken, so the arm may too. (Predicated, a value
    selected on its own sign, `where(x > 0, x * x, -x)`, nested a few times, copied its
    condition into every load's predicate, those predicates' loads too: a tiny graph under
    dynamic shapes lowered to 2.3 M characters of IR, a 4-minute build.)"""

    def add(n: Any) -> Any:
        if isinstance(n, BufferLoad) and _key(n) not in read:
            mask = condition if n.predicate is None else And(n.predicate, condition)
            return BufferLoad(n.buffer, n.indices, mask)
        return None

    return rewrite(arm, add)


def _unconditional_loads(condition: Expr) -> set:
    """The (buffer, indices) of the loads `condition` always makes: unpredicated, and outside
    the arms of any select in it."""
    found, stack = set(), [condition]
    while stack:
        n = stack.pop()
        if isinstance(n, Select):
            stack.append(n.condition)
            continue
        if isinstance(n, BufferLoad) and n.predicate is None:
            found.add(_key(n))
        stack.extend(children(n))
    return found


def _key(load: BufferLoad) -> tuple:
    return (id(load.buffer), structural_key(tuple(load.indices)))
