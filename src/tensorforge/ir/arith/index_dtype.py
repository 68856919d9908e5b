"""Which integer type a buffer's offsets need: int64 wherever the buffer can reach 2**31 elements.

As in TVM, offset arithmetic stays int32 where every element of a buffer is reachable with it and
becomes int64 where it may not be: a constant shape of 2**31 elements or more, or a symbolic one
whose extents (each up to its dtype's maximum) can multiply past int32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tensorforge.ir.arith.interval import Interval, const_bounds
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Cast, Const, Expr, Var
from tensorforge.te.visit import walk

INT32_MAX = 2**31 - 1


def max_value(e: Expr) -> float:
    """The largest value `e` can take when each free integer Var ranges over [0, its maximum]."""
    if isinstance(e, Const):
        return int(e.value)
    ranges = {
        v: Interval(Const(0, v.dtype), Const(dt.int_range(v.dtype)[1], v.dtype))
        for v in walk(e)
        if isinstance(v, Var) and dt.is_int(v.dtype)
    }
    _, hi = const_bounds(e, ranges)
    return math.inf if hi is None else hi


def max_elements(shape: Sequence[Expr]) -> float:
    """An upper bound on how many elements a buffer of `shape` holds."""
    total: float = 1
    for extent in shape:
        bound = max_value(extent)
        if bound <= 0:
            return 0
        total *= bound
    return total


def offset_dtype(shape: Sequence[Expr], strides: Sequence[Expr] | None = None) -> str:
    """ "int64" if an offset into a buffer of `shape` (and `strides`) can pass int32, else "int32"."""
    exprs = list(shape) + list(strides or ())
    if any(dt.is_int(e.dtype) and dt.bits_of(e.dtype) > 32 for e in exprs):
        return "int64"
    if strides:
        span = 1 + sum(
            max(0, max_value(st)) * max(0, max_value(n) - 1) for st, n in zip(strides, shape)
        )
        return "int64" if span > INT32_MAX else "int32"
    return "int64" if max_elements(shape) > INT32_MAX else "int32"


def widen(e: Expr, dtype: str) -> Expr:
    """`e` as the integer `dtype` (a Cast where it is narrower; as is where it already is)."""
    if e.dtype == dtype or not dt.is_int(dtype):
        return e
    if isinstance(e, Const):
        return Const(int(e.value), dtype)
    if dt.bits_of(e.dtype) >= dt.bits_of(dtype):
        return e
    return Cast(dtype, e)


def narrow(e: Expr, dtype: str) -> Expr:
    """`e` cast down to the integer `dtype` where it is wider (its values must fit `dtype`)."""
    if e.dtype == dtype or not dt.is_int(e.dtype) or dt.bits_of(e.dtype) <= dt.bits_of(dtype):
        return e
    return Cast(dtype, e)


__all__ = ["INT32_MAX", "max_elements", "max_value", "narrow", "offset_dtype", "widen"]
