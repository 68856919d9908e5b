"""Math intrinsics and selection: te.exp, te.sqrt, te.if_then_else, te.all, ..."""

from __future__ import annotations

from functools import reduce as _fold
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt
from tensorforge.te.expr import And, Call, Expr, Or, Select, _operands, _to_bool, as_expr, const

FLOAT_UNARY = (
    "exp",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "floor",
    "ceil",
    "round",
)


def _float_call(name: str, x: Any) -> Expr:
    x = as_expr(x)
    if not dt.is_float(x.dtype):
        x = x.astype("float32")
    return Call(x.dtype, name, (x,))


def exp(x):
    return _float_call("exp", x)  # noqa: E704


def log(x):
    return _float_call("log", x)  # noqa: E704


def log2(x):
    return _float_call("log2", x)  # noqa: E704


def sqrt(x):
    return _float_call("sqrt", x)  # noqa: E704


def rsqrt(x):
    return _float_call("rsqrt", x)  # noqa: E704


def tanh(x):
    return _float_call("tanh", x)  # noqa: E704


def sigmoid(x):
    return _float_call("sigmoid", x)  # noqa: E704


def erf(x):
    return _float_call("erf", x)  # noqa: E704


def floor(x):
    return _float_call("floor", x)  # noqa: E704


def ceil(x):
    return _float_call("ceil", x)  # noqa: E704


def round(x):
    return _float_call("round", x)  # noqa: A001,E704


def abs(x: Any) -> Expr:  # noqa: A001
    x = as_expr(x)
    return Call(x.dtype, "abs", (x,))


def power(x: Any, y: Any) -> Expr:
    x, y = _operands(x, y)
    if not dt.is_float(x.dtype):
        x, y = x.astype("float32"), y.astype("float32")
    return Call(x.dtype, "pow", (x, y))


def if_then_else(cond: Any, then_value: Any, else_value: Any) -> Expr:
    cond = as_expr(cond)
    if not dt.is_bool(cond.dtype):
        raise ExprError(f"if_then_else: condition {cond} must be boolean, not {cond.dtype}")
    a, b = _operands(then_value, else_value)
    return Select(cond, a, b)


def all(*conds: Any) -> Expr:  # noqa: A001
    if not conds:
        return const(True)
    return _fold(And, [_to_bool(as_expr(c)) for c in conds])


def any(*conds: Any) -> Expr:  # noqa: A001
    if not conds:
        return const(False)
    return _fold(Or, [_to_bool(as_expr(c)) for c in conds])
