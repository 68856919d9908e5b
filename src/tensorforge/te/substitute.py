"""Replace variables by expressions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tensorforge.te.expr import Expr, Var
from tensorforge.te.visit import rewrite


def substitute(node: Any, mapping: Mapping[Var, Expr]) -> Any:
    """`node` with every Var in `mapping` replaced (Vars compare by identity)."""
    if not mapping:
        return node
    by_id = {id(v): e for v, e in mapping.items()}

    def rule(n: Any) -> Any | None:
        if isinstance(n, Var):
            return by_id.get(id(n))
        return None

    return rewrite(node, rule)
