"""Expression nodes: the scalar language tensor computations are written in.

Nodes are frozen dataclasses. Python operators build new nodes (`a + b` is `Add(a, b)`), so
`==` builds an `EQ` node too; an `EQ`/`NE` node converts to bool by structural comparison (as in
TVM), which keeps dataclass equality and `in` working, while any other Expr refuses `bool()`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tensorforge.errors import ExprError
from tensorforge.te import dtype as dt

if TYPE_CHECKING:
    from tensorforge.te.tensor import IterVar, Tensor

node = dataclass(frozen=True, eq=False, repr=False)


class Expr:
    """Base of all expressions. Subclasses define a `dtype`."""

    dtype: str

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, other):
        return _binary(Add, self, other)

    def __radd__(self, other):
        return _binary(Add, other, self)

    def __sub__(self, other):
        return _binary(Sub, self, other)

    def __rsub__(self, other):
        return _binary(Sub, other, self)

    def __mul__(self, other):
        return _binary(Mul, self, other)

    def __rmul__(self, other):
        return _binary(Mul, other, self)

    def __truediv__(self, other):
        return _true_div(self, other)

    def __rtruediv__(self, other):
        return _true_div(other, self)

    def __floordiv__(self, other):
        return _binary(FloorDiv, self, other)

    def __rfloordiv__(self, other):
        return _binary(FloorDiv, other, self)

    def __mod__(self, other):
        return _binary(FloorMod, self, other)

    def __rmod__(self, other):
        return _binary(FloorMod, other, self)

    def __neg__(self):
        if dt.is_float(self.dtype):  # NOTE: 0 - x is +0.0 at x = 0.0, where -x is -0.0
            return _binary(Mul, self, const(-1, self.dtype))
        return _binary(Sub, const(0, self.dtype), self)

    # -- comparisons --------------------------------------------------------------------------
    def __lt__(self, other):
        return _compare(LT, self, other)

    def __le__(self, other):
        return _compare(LE, self, other)

    def __gt__(self, other):
        return _compare(GT, self, other)

    def __ge__(self, other):
        return _compare(GE, self, other)

    def __eq__(self, other):  # type: ignore[override]
        return _compare(EQ, self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _compare(NE, self, other)

    def __hash__(self) -> int:
        return hash(structural_key(self))

    def __bool__(self) -> bool:
        raise ExprError(
            f"the truth value of expression {self} is unknown until the kernel runs; "
            f"use te.if_then_else / te.all / te.any to branch inside an expression"
        )

    # logical operators on boolean expressions
    def __and__(self, other):
        return And(_to_bool(self), _to_bool(as_expr(other)))

    def __or__(self, other):
        return Or(_to_bool(self), _to_bool(as_expr(other)))

    def __invert__(self):
        return Not(_to_bool(self))

    def astype(self, dtype: str) -> Expr:
        dtype = dt.check_dtype(dtype, "astype")
        return self if dtype == self.dtype else Cast(dtype, self)

    def __str__(self) -> str:
        from tensorforge.te.printer import expr_to_str

        return expr_to_str(self)

    def __repr__(self) -> str:
        return str(self)


# -- leaves -----------------------------------------------------------------------------------


@node
class Var(Expr):
    """A named scalar: a loop variable, a symbolic shape or a scalar argument. Compared by identity."""

    name: str
    dtype: str = "int32"

    def __hash__(self) -> int:
        return id(self)


@node
class SizeVar(Var):
    """A symbolic size, known to be at least `min_value`: TVM's te.size_var (>= 0), or a size
    torch.compile made symbolic (>= 2: Dynamo specializes sizes 0 and 1 and guards the rest).
    The interval analyzer reads the fact, so `n % 16 < n` or a loop of `(n + 15) // 16 >= 1`
    iterations is provable."""

    min_value: int = 0

    def __hash__(self) -> int:
        return id(self)


@node
class Const(Expr):
    value: Any
    dtype: str = "int32"


# -- arithmetic -------------------------------------------------------------------------------


@node
class BinaryOp(Expr):
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@node
class Add(BinaryOp):
    pass


@node
class Sub(BinaryOp):
    pass


@node
class Mul(BinaryOp):
    pass


@node
class Div(BinaryOp):
    """True division of floats."""


@node
class FloorDiv(BinaryOp):
    """Integer division rounding toward minus infinity (Python's //)."""


@node
class FloorMod(BinaryOp):
    """Integer remainder with the sign of the divisor (Python's %)."""


@node
class Min(BinaryOp):
    pass


@node
class Max(BinaryOp):
    pass


@node
class CompareOp(BinaryOp):
    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes("bool", dt.lanes_of(self.a.dtype))


@node
class LT(CompareOp):
    pass


@node
class LE(CompareOp):
    pass


@node
class GT(CompareOp):
    pass


@node
class GE(CompareOp):
    pass


@node
class EQ(CompareOp):
    def __bool__(self) -> bool:
        return structural_equal(self.a, self.b)


@node
class NE(CompareOp):
    def __bool__(self) -> bool:
        return not structural_equal(self.a, self.b)


@node
class And(BinaryOp):
    pass


@node
class Or(BinaryOp):
    pass


@node
class Not(Expr):
    a: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.a.dtype


@node
class Select(Expr):
    """`true_value if condition else false_value`; both sides may be evaluated."""

    condition: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.true_value.dtype


@node
class Cast(Expr):
    dtype: str
    value: Expr


@node
class Call(Expr):
    """A math intrinsic such as exp, log, sqrt, by name."""

    dtype: str
    name: str
    args: tuple[Expr, ...]


@node
class Let(Expr):
    """Bind `var` to `value` inside `body` (used to evaluate a value once)."""

    var: Var
    value: Expr
    body: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype


# -- tensors ----------------------------------------------------------------------------------


@node
class TensorRead(Expr):
    """`tensor[indices]` inside a compute body (before lowering turns it into a buffer load)."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype


@node
class CommReducer:
    """A commutative reduction: `combine(lhs, rhs)` over tuples, starting from `identity`."""

    name: str
    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[Expr, ...]
    identity: tuple[Expr, ...]

    def combine(self, lhs: tuple[Expr, ...], rhs: tuple[Expr, ...]) -> tuple[Expr, ...]:
        from tensorforge.te.substitute import substitute

        mapping = dict(zip(self.lhs, lhs)) | dict(zip(self.rhs, rhs))
        return tuple(substitute(r, mapping) for r in self.result)

    def __call__(self, *args, **kwargs):
        from tensorforge.te.reduction import apply_reducer

        return apply_reducer(self, *args, **kwargs)


@node
class Reduce(Expr):
    """One output (`value_index`) of a reduction of `source` over `axis` where `condition` holds."""

    combiner: CommReducer
    source: tuple[Expr, ...]
    axis: tuple[IterVar, ...]
    condition: Expr
    value_index: int = 0

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source[self.value_index].dtype


# -- construction helpers ---------------------------------------------------------------------


def const(value: Any, dtype: str | None = None) -> Const:
    """A typed constant; without a dtype, ints are int32 (int64 past int32's range, as in TVM),
    floats float32 and bools bool. A value that does not fit `dtype` raises ExprError."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -(2**31) <= value < 2**31 else "int64"
        else:
            dtype = "float32"
    dtype = dt.check_dtype(dtype, "const") if "x" not in dtype else dtype
    if dt.is_bool(dtype):
        value = bool(value)
    elif dt.is_int(dtype):
        value = int(value)
    else:
        value = float(value)
    dt.check_fits(value, dtype, "const")
    return Const(value, dtype)


def as_expr(value: Any, like: str | None = None) -> Expr:
    """Turn a Python number into a Const (taking dtype `like` where the rules say so)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool):
        return const(value, "bool")
    if isinstance(value, int):
        if like is not None and not dt.is_bool(like):
            return const(value, dt.element_of(like))
        return const(value)
    if isinstance(value, float):
        if like is not None and dt.is_float(like):
            return const(value, dt.element_of(like))
        return const(value, "float32")
    from tensorforge.te.tensor import IterVar  # an IterVar stands for its loop variable

    if isinstance(value, IterVar):
        return value.var
    if hasattr(value, "dtype") and hasattr(value, "item"):  # numpy scalar
        return const(value.item(), str(value.dtype))
    raise ExprError(f"cannot use {value!r} (a {type(value).__name__}) in a tensor expression")


def _operands(a: Any, b: Any) -> tuple[Expr, Expr]:
    """Convert both operands, applying the Python-number and promotion rules."""
    a_is_expr, b_is_expr = isinstance(a, Expr), isinstance(b, Expr)
    if not a_is_expr and not b_is_expr:
        a, b = as_expr(a), as_expr(b)
    elif not a_is_expr:
        b = as_expr(b)
        if isinstance(a, float) and not dt.is_float(b.dtype):
            b = Cast("float32", b)
        _check_python_number(a, b)
        a = as_expr(a, b.dtype)
    elif not b_is_expr:
        if isinstance(b, float) and not dt.is_float(a.dtype):
            a = Cast("float32", a)
        _check_python_number(b, a)
        b = as_expr(b, a.dtype)
    if a.dtype != b.dtype:
        target = dt.promote(dt.element_of(a.dtype), dt.element_of(b.dtype))
        if dt.element_of(a.dtype) != target:
            a = Cast(dt.with_lanes(target, dt.lanes_of(a.dtype)), a)
        if dt.element_of(b.dtype) != target:
            b = Cast(dt.with_lanes(target, dt.lanes_of(b.dtype)), b)
    return a, b


def _check_python_number(value: Any, beside: Expr) -> None:
    """A Python int takes `beside`'s dtype: refuse one that does not fit it (it would wrap)."""
    if isinstance(value, int) and not isinstance(value, bool) and dt.is_int(beside.dtype):
        dtype = dt.element_of(beside.dtype)
        lo, hi = dt.int_range(dtype)
        if not lo <= value <= hi:
            raise ExprError(
                f"the constant {value} does not fit {dtype}, the dtype of {beside} it is "
                f"combined with (range [{lo}, {hi}]); widen the expression first, e.g. "
                f"({beside}).astype('int64')"
            )


def _binary(cls: type, a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    if cls in (FloorDiv, FloorMod) and dt.is_bool(a.dtype):
        raise ExprError(f"{cls.__name__}: operands must be numbers, not bool ({a}, {b})")
    return cls(a, b)


def _true_div(a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    if not dt.is_float(a.dtype):
        raise ExprError(
            f"true division '/' of integer expressions {a} and {b} is ambiguous; "
            f"use '//' for floor division or cast to a float dtype first"
        )
    return Div(a, b)


def _compare(cls: type, a: Any, b: Any) -> Expr:
    a, b = _operands(a, b)
    return cls(a, b)


def _to_bool(e: Expr) -> Expr:
    if not dt.is_bool(e.dtype):
        raise ExprError(f"expected a boolean expression, got {e} of dtype {e.dtype}")
    return e


# -- structural comparison --------------------------------------------------------------------


def structural_key(e: Any) -> Any:
    """A hashable key equal for structurally equal expressions (Vars by identity)."""
    if isinstance(e, Var):
        return ("Var", id(e))
    if isinstance(e, Const):
        return ("Const", e.value, e.dtype)
    if isinstance(e, Expr) or dataclasses.is_dataclass(e) and not isinstance(e, type):
        if not isinstance(e, Expr) and not _is_value_node(e):
            return ("obj", id(e))
        return (type(e).__name__,) + tuple(
            structural_key(getattr(e, f.name)) for f in dataclasses.fields(e)
        )
    if isinstance(e, tuple):
        return tuple(structural_key(x) for x in e)
    return e


def _is_value_node(e: Any) -> bool:
    return e.__dataclass_params__.eq


def structural_equal(a: Any, b: Any) -> bool:
    if a is b:
        return True
    return structural_key(a) == structural_key(b)
