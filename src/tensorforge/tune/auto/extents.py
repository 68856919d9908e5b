"""Axis extents as the sketch rules' decisions size them: a constant's value, a size known only
at run time at its hint (a typical value), else 1."""

from __future__ import annotations

from typing import Any


def extent_of(iv: Any) -> int:
    """The constant extent of an axis, 1 where it is known only at run time."""
    value = getattr(iv.dom.extent, "value", None)
    return value if isinstance(value, int) else 1


def extent_of_dim(t: Any, dim: int) -> int:
    """The constant size of a tensor's dimension `dim`, 1 where it is known only at run time."""
    value = getattr(t.shape[dim], "value", None)
    return value if isinstance(value, int) else 1


def is_static(iv: Any) -> bool:
    """An axis of a constant extent (a leaf a split made has no domain of its own: taken as one,
    as the decisions size it 1)."""
    return iv.dom is None or isinstance(getattr(iv.dom.extent, "value", None), int)


def hinted_extent(extent: Any, size_hints: dict) -> int:
    """An extent as the decisions size it: its value; where it is a size known only at run
    time, its value at the hints (`size_hints`: te.var -> a typical value, such as Dynamo's
    example input); 1 where neither tells."""
    from tensorforge.ir.arith.simplifier import simplify_expr
    from tensorforge.te.expr import Const
    from tensorforge.te.substitute import substitute

    value = getattr(extent, "value", extent)
    if isinstance(value, int) or not size_hints:
        return value if isinstance(value, int) else 1
    at_hints = substitute(extent, {v: Const(h, v.dtype) for v, h in size_hints.items()})
    value = getattr(simplify_expr(at_hints), "value", None)
    return value if isinstance(value, int) and value >= 1 else 1


def same_extent(a: Any, b: Any) -> bool:
    """Two extents equal: the same number, or the same expression of run-time sizes (two sizes
    known only at run time are not taken for equal because their hints are)."""
    va, vb = getattr(a, "value", a), getattr(b, "value", b)
    if isinstance(va, int) or isinstance(vb, int):
        return va == vb
    return a is b or str(a) == str(b)
