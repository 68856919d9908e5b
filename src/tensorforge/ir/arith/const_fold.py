"""Fold operations on constants the way the kernel would compute them.

Integers use Python's floor division and modulo (the IR's FloorDiv/FloorMod); a result that
does not fit its dtype is not folded (nothing wraps silently: index arithmetic that can pass 2**31
is int64 before it gets here, see ir/arith/index_dtype.py); floats are computed in their own precision through numpy (float32 `0.1 + 0.2` is the
float32 sum); casts from float to int truncate toward zero. Where the kernel's result would be
undefined (integer division by zero, a NaN or out-of-range float cast to int) nothing is folded.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    And,
    BinaryOp,
    Const,
    Div,
    FloorDiv,
    FloorMod,
    Max,
    Min,
    Mul,
    Or,
    Sub,
)

_COMPARE = {
    LT: lambda a, b: a < b,
    LE: lambda a, b: a <= b,
    GT: lambda a, b: a > b,
    GE: lambda a, b: a >= b,
    EQ: lambda a, b: a == b,
    NE: lambda a, b: a != b,
}


def wrap_int(value: int, dtype: str) -> int:
    """`value` reduced to the range of the integer `dtype` (two's complement wrap-around)."""
    bits = dt.bits_of(dtype)
    value &= (1 << bits) - 1
    if not dt.is_unsigned(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def make_const(value: Any, dtype: str) -> Const:
    """A Const of scalar `dtype` holding `value` as that dtype stores it."""
    if dt.is_bool(dtype):
        return Const(bool(value), dtype)
    if dt.is_int(dtype):
        return Const(wrap_int(int(value), dtype), dtype)
    return Const(dt.round_scalar(value, dtype), dtype)


def fold_binary(node: BinaryOp) -> Const | None:
    """`node` computed, when both operands are scalar constants and the result is defined."""
    a, b = node.a, node.b
    if not (isinstance(a, Const) and isinstance(b, Const)) or dt.lanes_of(a.dtype) != 1:
        return None
    dtype = a.dtype
    if type(node) in _COMPARE:
        if dt.is_float(dtype):
            x, y = float(a.value), float(b.value)
        else:
            x, y = int(a.value), int(b.value)
        return Const(bool(_COMPARE[type(node)](x, y)), "bool")
    if dt.is_bool(dtype):
        match node:
            case And():
                return Const(bool(a.value) and bool(b.value), "bool")
            case Or():
                return Const(bool(a.value) or bool(b.value), "bool")
        return None
    if dt.is_int(dtype):
        value = _fold_int(node, int(a.value), int(b.value))
        if value is None or wrap_int(value, dtype) != value:
            return None  # undefined or overflowing: left for the kernel, never wrapped here
        return Const(value, dtype)
    if dt.is_float(dtype):
        return _fold_float(node, a.value, b.value, dtype)
    return None


def _fold_int(node: BinaryOp, x: int, y: int) -> int | None:
    match node:
        case Add():
            return x + y
        case Sub():
            return x - y
        case Mul():
            return x * y
        case FloorDiv():
            return None if y == 0 else x // y
        case FloorMod():
            return None if y == 0 else x % y
        case Min():
            return min(x, y)
        case Max():
            return max(x, y)
    return None  # Div on ints is not in the IR


def _fold_float(node: BinaryOp, x: Any, y: Any, dtype: str) -> Const | None:
    scalar = np.float32 if dt.element_of(dtype) == "bfloat16" else np.dtype(dtype).type
    x, y = scalar(x), scalar(y)
    with np.errstate(all="ignore"):
        match node:
            case Add():
                value = x + y
            case Sub():
                value = x - y
            case Mul():
                value = x * y
            case Div():
                value = np.true_divide(x, y)
            case FloorDiv():
                value = np.floor_divide(x, y)
            case FloorMod():
                value = np.remainder(x, y)
            case Min() | Max() if math.isnan(x) or math.isnan(y):
                return None  # backends differ on NaN in min/max: leave it to them
            case Min():
                value = min(x, y)
            case Max():
                value = max(x, y)
            case _:
                return None
    return make_const(float(value), dtype)


def fold_cast(dtype: str, value: Const) -> Const | None:
    """`Cast(dtype, value)` computed, or None where the kernel's result is undefined."""
    source = value.dtype
    if dt.lanes_of(dtype) != 1 or dt.lanes_of(source) != 1:
        return None
    v = value.value
    if dt.is_bool(dtype):
        return Const(bool(v != 0), dtype)
    if dt.is_int(dtype):
        if dt.is_float(source):
            if not math.isfinite(float(v)):
                return None
            v = math.trunc(float(v))
            if wrap_int(v, dtype) != v:
                return None  # out of range: undefined in C and LLVM
        return make_const(int(v), dtype)
    if dt.is_float(dtype):
        with np.errstate(all="ignore"):
            return make_const(float(v) if dt.is_float(source) else int(v), dtype)
    return None
