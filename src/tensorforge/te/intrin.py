"""Math intrinsics and selection: te.exp, te.sqrt, te.if_then_else, te.all, ..."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce as _fold
from typing import Any

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt
from tensorforge.te.expr import And, Call, Expr, Or, Select, _operands, _to_bool, as_expr, const

FLOAT_UNARY = (
    "exp",
    "expm1",
    "log",
    "log1p",
    "log2",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "floor",
    "ceil",
    "round",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "exp2",
    "log10",
    "erfc",
)
# the trigonometric, hyperbolic and other functions each backend computes with its C library's
# (libm per lane on the CPU, CUDA's math functions)
LIBM_UNARY = FLOAT_UNARY[FLOAT_UNARY.index("sin") :]


def _float_call(name: str, x: Any) -> Expr:
    x = as_expr(x)
    if not dt.is_float(x.dtype):
        x = x.astype("float32")
    return Call(x.dtype, name, (x,))


def _float_unary(name: str) -> Callable[[Any], Expr]:
    """The intrinsic te.<name>: a Call of `name` on a float (an integer is made float32)."""

    def intrinsic(x: Any) -> Expr:
        return _float_call(name, x)

    intrinsic.__name__ = intrinsic.__qualname__ = name
    intrinsic.__doc__ = f"{name}(x), elementwise; an integer x is computed as float32."
    return intrinsic


exp = _float_unary("exp")
expm1 = _float_unary("expm1")  # e**x - 1, accurate where x is small
log = _float_unary("log")
log1p = _float_unary("log1p")  # log(1 + x), accurate where x is small
log2 = _float_unary("log2")
sqrt = _float_unary("sqrt")
rsqrt = _float_unary("rsqrt")
tanh = _float_unary("tanh")
sigmoid = _float_unary("sigmoid")
erf = _float_unary("erf")
floor = _float_unary("floor")
ceil = _float_unary("ceil")
round = _float_unary("round")  # noqa: A001
sin = _float_unary("sin")
cos = _float_unary("cos")
tan = _float_unary("tan")
asin = _float_unary("asin")
acos = _float_unary("acos")
atan = _float_unary("atan")
sinh = _float_unary("sinh")
cosh = _float_unary("cosh")
asinh = _float_unary("asinh")
acosh = _float_unary("acosh")
atanh = _float_unary("atanh")
exp2 = _float_unary("exp2")  # 2**x
log10 = _float_unary("log10")
erfc = _float_unary("erfc")  # 1 - erf(x), accurate where erf(x) is near 1


def abs(x: Any) -> Expr:  # noqa: A001
    x = as_expr(x)
    return Call(x.dtype, "abs", (x,))


def power(x: Any, y: Any) -> Expr:
    x, y = _operands(x, y)
    if not dt.is_float(x.dtype):
        x, y = x.astype("float32"), y.astype("float32")
    return Call(x.dtype, "pow", (x, y))


def _float_binary(name: str, x: Any, y: Any) -> Expr:
    x, y = _operands(x, y)
    if not dt.is_float(x.dtype):
        x, y = x.astype("float32"), y.astype("float32")
    return Call(x.dtype, name, (x, y))


def atan2(y: Any, x: Any) -> Expr:
    """The angle of the point (x, y), in (-pi, pi], elementwise (C's atan2)."""
    return _float_binary("atan2", y, x)


def fmod(x: Any, y: Any) -> Expr:
    """C's fmod: x - n y with n = trunc(x / y), exactly; x's sign (-0 kept), NaN for y = 0."""
    return _float_binary("fmod", x, y)


def hypot(x: Any, y: Any) -> Expr:
    """sqrt(x**2 + y**2) without overflow or underflow in the squares (C's hypot)."""
    return _float_binary("hypot", x, y)


def copysign(x: Any, y: Any) -> Expr:
    """x's magnitude with y's sign bit (-0.0 and a NaN's sign count), elementwise (C's copysign)."""
    return _float_binary("copysign", x, y)


def nextafter(x: Any, y: Any) -> Expr:
    """The float next to x in the direction of y (y itself where equal), elementwise (C's)."""
    return _float_binary("nextafter", x, y)


# integer operations on the bits: each a Call of the operands' (common) integer dtype; the shift
# count must lie in [0, bits) (te leaves others undefined, as C and LLVM do)
BITWISE = ("bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")


def _bitwise(name: str, x: Any, y: Any) -> Expr:
    x, y = _operands(x, y)
    if not dt.is_int(x.dtype) or dt.is_bool(x.dtype):
        raise ExprError(f"{name}: operands must be integers, not {x.dtype}")
    return Call(x.dtype, name, (x, y))


def bitwise_and(x: Any, y: Any) -> Expr:
    return _bitwise("bitwise_and", x, y)


def bitwise_or(x: Any, y: Any) -> Expr:
    return _bitwise("bitwise_or", x, y)


def bitwise_xor(x: Any, y: Any) -> Expr:
    return _bitwise("bitwise_xor", x, y)


def shift_left(x: Any, count: Any) -> Expr:
    """x * 2**count, wrapped to x's type (count in [0, bits))."""
    return _bitwise("shift_left", x, count)


def shift_right(x: Any, count: Any) -> Expr:
    """x >> count: arithmetic (sign-filling) of a signed type, logical of an unsigned one."""
    return _bitwise("shift_right", x, count)


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
