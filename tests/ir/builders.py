"""Shorthands for building loop IR by hand in tests: constants, buffers, loops, loads, stores,
thread bindings and reducers."""

from __future__ import annotations

import math

from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import (
    BufferStore,
    For,
    LoopKind,
)
from tensorforge.te.expr import (
    CommReducer,
    Const,
    Select,
    Var,
)


def c(value, dtype="int32") -> Const:
    return Const(value, dtype)


def f32(value) -> Const:
    return Const(float(value), "float32")


def buf(name, n, dtype="float32", scope="global") -> Buffer:
    return Buffer(name, (n if not isinstance(n, int) else c(n),), dtype, scope)


def bind(var, extent, tag, body, low=0) -> For:
    extent = c(extent) if isinstance(extent, int) else extent
    return For(var, c(low), extent, body, LoopKind.THREAD_BINDING, tag)


def loop(var, extent, body, kind=LoopKind.SERIAL, low=0) -> For:
    extent = c(extent) if isinstance(extent, int) else extent
    return For(var, c(low), extent, body, kind)


def load(b, index, predicate=None) -> BufferLoad:
    return BufferLoad(b, (index,), predicate)


def store(b, index, value, predicate=None) -> BufferStore:
    return BufferStore(b, (index,), value, predicate)


def sum_reducer(dtype="float32") -> CommReducer:
    x, y = Var("x", dtype), Var("y", dtype)
    return CommReducer("sum", (x,), (y,), (x + y,), (Const(0.0 if "float" in dtype else 0, dtype),))


def argmax_reducer() -> CommReducer:
    """(index, value): the larger value; on a tie the left (lower-index) operand."""
    x0, x1 = Var("x0", "int32"), Var("x1", "float32")
    y0, y1 = Var("y0", "int32"), Var("y1", "float32")
    keep_left = x1 >= y1
    return CommReducer(
        "argmax",
        (x0, x1),
        (y0, y1),
        (Select(keep_left, x0, y0), Select(keep_left, x1, y1)),
        (c(-1), f32(-math.inf)),
    )
