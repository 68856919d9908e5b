"""TVM's small te helpers: min_value / max_value of a dtype, size_var, and the named divisions."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Expr, FloorDiv, FloorMod, SizeVar, _binary, const


def min_value(dtype: Any) -> Const:
    """The smallest value of `dtype` (-inf is not used: the most negative finite float)."""
    dtype = dt.check_dtype(dtype, "min_value")
    return const(_limits(dtype)[0], dtype)


def max_value(dtype: Any) -> Const:
    """The largest value of `dtype` (the largest finite float)."""
    dtype = dt.check_dtype(dtype, "max_value")
    return const(_limits(dtype)[1], dtype)


def _limits(dtype: str) -> tuple[Any, Any]:
    if dt.is_bool(dtype):
        return False, True
    info = np.finfo(dtype) if dt.is_float(dtype) else np.iinfo(dtype)
    kind = float if dt.is_float(dtype) else int
    return kind(info.min), kind(info.max)


def size_var(name: str = "n", dtype: str = "int32", min_value: int = 0) -> SizeVar:
    """A symbolic size (TVM's te.size_var): a te.var the analyzer knows is >= `min_value`."""
    return SizeVar(name, dt.check_dtype(dtype, f"size_var '{name}'"), min_value)


def floordiv(a: Any, b: Any) -> Expr:
    """`a // b`, rounding toward minus infinity."""
    return _binary(FloorDiv, a, b)


def floormod(a: Any, b: Any) -> Expr:
    """`a % b`, with the sign of b."""
    return _binary(FloorMod, a, b)


indexdiv = floordiv  # TVM's names for index arithmetic (floor semantics there too)
indexmod = floormod
