"""Element-wise ATen operators as te expressions: activations, arithmetic, comparisons, where."""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph import symbols as sym
from tensorforge.graph.lowerer import NATIVE, TE_TO_TORCH
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported, in_dtype, opmath_dtype
from tensorforge.te import dtype as dt
from tensorforge.te.intrin import LIBM_UNARY

aten = torch.ops.aten


def _zero(x):
    return te.const(0, x.dtype)


UNARY = {
    aten.relu: lambda x: te.max(x, _zero(x)),
    aten.neg: lambda x: -x,
    aten.exp: te.exp,
    aten.expm1: te.expm1,
    aten.log: te.log,
    aten.log1p: te.log1p,
    aten.sqrt: te.sqrt,
    aten.rsqrt: te.rsqrt,
    aten.tanh: te.tanh,
    aten.sigmoid: te.sigmoid,
    aten.abs: te.abs,
    aten.erf: te.erf,
    aten.floor: te.floor,
    aten.ceil: te.ceil,
    aten.round: te.round,  # half to even, as torch
    aten.trunc: lambda x: _trunc(x),
    aten.reciprocal: lambda x: te.const(1, x.dtype) / x,
    aten.silu: lambda x: x * te.sigmoid(x),
    aten.logical_not: lambda x: x == _zero(x),
    aten.bitwise_not: lambda x: x == _zero(x),
    aten.sign: lambda x: _sign(x),
    aten.isnan: lambda x: x != x,  # (only NaN differs from itself)
    aten.isinf: lambda x: te.abs(x) == te.const(math.inf, x.dtype),
    aten.log2: te.log2,
    **{getattr(aten, name): getattr(te, name) for name in LIBM_UNARY},
}
JUMPS = {aten.floor, aten.ceil, aten.round, aten.trunc, aten.sign}  # half operands as stored
INTEGER_IDENTITY = {aten.floor, aten.ceil, aten.round, aten.trunc}  # of an integer: itself


def _unary(op, fn):
    def lower(ctx, node, x, *rest, **kwargs):
        if rest or kwargs:
            raise Unsupported(f"{op} with extra arguments")
        x = ctx.lazy(x)
        if op is aten.bitwise_not and dt.is_int(x.dtype):
            return ctx.pointwise(_bitwise_not, [x], compute=x.dtype)
        if op is aten.isinf and not dt.is_float(x.dtype):
            return ctx.pointwise(lambda v: te.const(False, "bool"), [x], compute=x.dtype)
        if op in (aten.logical_not, aten.bitwise_not, aten.isnan, aten.isinf):
            return ctx.pointwise(fn, [x], compute=x.dtype)
        if op is aten.sign and x.dtype == "bool":
            return x  # (a bool is its own sign)
        if op in INTEGER_IDENTITY and not dt.is_float(x.dtype):
            return x
        return ctx.pointwise(fn, [x], jumps=op in JUMPS)

    return lower


for _op, _fn in UNARY.items():
    lowers(_op.default)(_unary(_op, _fn))


def _sign(x):
    """1, -1 or 0 (NaN's sign is 0, as torch gives it)."""
    one, zero = te.const(1, x.dtype), _zero(x)
    return te.if_then_else(x > zero, one, te.if_then_else(x < zero, zero - one, zero))


def _bitwise_not(x):
    """~x of an integer: every bit flipped, -x - 1 in two's complement (max - x unsigned)."""
    lo, hi = dt.int_range(x.dtype)
    return te.const(hi if lo == 0 else -1, x.dtype) - x


@lowers(aten.gelu.default)
def gelu(ctx, node, x, approximate="none"):
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        fn = lambda v: 0.5 * v * (1.0 + te.tanh(c * (v + 0.044715 * v * v * v)))  # noqa: E731
    else:
        fn = lambda v: 0.5 * v * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0))))  # noqa: E731
    return ctx.pointwise(fn, [ctx.lazy(x)])


@lowers(aten.elu.default)
def elu(ctx, node, x, alpha=1, scale=1, input_scale=1):
    """ELU (SELU and CELU are its scales): x * scale above 0, else expm1(x * input_scale) *
    alpha * scale."""

    def fn(v):
        negative = te.expm1(v * input_scale) * (alpha * scale)
        return te.if_then_else(v > _zero(v), v * scale, negative)

    return ctx.pointwise(fn, [ctx.lazy(x)])


@lowers(aten.hardtanh.default, aten.clamp.default)
def clamp(ctx, node, x, lo=None, hi=None):
    if isinstance(lo, Lazy) or isinstance(hi, Lazy):
        raise Unsupported("clamp by tensors")

    def fn(v):
        if lo is not None:
            v = te.max(v, te.const(lo, v.dtype))
        if hi is not None:
            v = te.min(v, te.const(hi, v.dtype))
        return v

    if node.target is aten.hardtanh.default:
        lo, hi = (-1.0 if lo is None else lo), (1.0 if hi is None else hi)
    return ctx.pointwise(fn, [ctx.lazy(x)])


@lowers(aten.leaky_relu.default)
def leaky_relu(ctx, node, x, slope=0.01):
    return ctx.pointwise(lambda v: te.if_then_else(v > _zero(v), v, v * slope), [ctx.lazy(x)])


@lowers(aten.pow.Tensor_Scalar)
def pow_scalar(ctx, node, x, exponent):
    x = ctx.lazy(x)
    if exponent == 2:
        fn = lambda v: v * v  # noqa: E731
    elif exponent == 3:
        fn = lambda v: v * v * v  # noqa: E731
    elif exponent == 0.5:
        fn = te.sqrt
    elif exponent == -0.5:
        fn = te.rsqrt
    elif exponent == 1:
        fn = lambda v: v  # noqa: E731
    elif exponent == -1:
        fn = lambda v: te.const(1, v.dtype) / v  # noqa: E731
    else:
        fn = lambda v: te.power(v, te.const(exponent, v.dtype))  # noqa: E731
    return ctx.pointwise(fn, [x])


@lowers(aten.pow.Tensor_Tensor)
def pow_tensor(ctx, node, x, y):
    return ctx.pointwise(te.power, [ctx.lazy(x), ctx.lazy(y)])


def _arith(fn, with_alpha=False):
    def lower(ctx, node, a, b, alpha=1, **kwargs):
        if kwargs:
            raise Unsupported(f"{node.target} with {sorted(kwargs)}")
        if with_alpha and alpha != 1:
            return ctx.pointwise(lambda x, y, s: fn(x, y * s), [a, b, alpha])
        return ctx.pointwise(fn, [a, b])

    return lower


for _ops, _fn, _alpha in [
    ((aten.add.Tensor, aten.add.Scalar), lambda x, y: x + y, True),
    ((aten.sub.Tensor, aten.sub.Scalar), lambda x, y: x - y, True),
    ((aten.mul.Tensor, aten.mul.Scalar), lambda x, y: x * y, False),
    ((aten.maximum.default,), te.max, False),
    ((aten.minimum.default,), te.min, False),
]:
    lowers(*_ops)(_arith(_fn, _alpha))
lowers(aten.rsub.Scalar)(_arith(lambda x, y: y - x, True))


@lowers(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode)
def div(ctx, node, a, b, rounding_mode=None):
    dtype = ctx.dtype_of(node)
    if rounding_mode is None:
        return ctx.pointwise(lambda x, y: x / y, [a, b])
    if not dt.is_float(dtype):  # te's // of integers is floor division, as torch's
        fn = _int_floor_div if rounding_mode == "floor" else _int_trunc_div
        return ctx.pointwise(fn, [a, b], compute=dtype)
    rounding = te.floor if rounding_mode == "floor" else _trunc
    return ctx.pointwise(lambda x, y: rounding(x / y), [a, b], jumps=True)


def _int_floor_div(x, y):
    return x // y


def _int_trunc_div(x, y):
    """x / y rounded toward zero: the floor quotient, one up where it was rounded down past
    zero (a remainder, and operands of opposite signs). NOTE: the remainder, not q * y != x:
    INT_MIN // -1 wraps to INT_MIN, and so would its product, where int32 and int64 products
    promise LLVM no overflow (nsw)."""
    q = x // y
    zero = _zero(q)
    inexact = te.all(x % y != zero, (x < zero) != (y < zero))
    return te.if_then_else(inexact, q + te.const(1, q.dtype), q)


@lowers(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(ctx, node, a, b):
    """Python's %: the remainder takes the divisor's sign (te's % of floats is C's fmod moved to
    the divisor's sign, as torch computes it; of integers, floor division's)."""
    dtype = ctx.dtype_of(node)
    return ctx.pointwise(lambda x, y: x % y, [a, b], compute=dtype, jumps=True)


@lowers(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, node, a, b):
    """C's fmod: the remainder takes the dividend's sign."""
    dtype = ctx.dtype_of(node)
    fn = _float_fmod if dt.is_float(dtype) else _int_fmod
    return ctx.pointwise(fn, [a, b], compute=dtype, jumps=True)


def _float_fmod(x, y):
    """C's fmod (te.fmod: each operand once; built from te's %, the floor remainder, it held x
    four times and a chain of them compiled for minutes)."""
    return te.fmod(x, y)


def _int_fmod(x, y):
    """The floor remainder moved from y's sign to x's: less y where the signs differ."""
    r = x % y
    zero = _zero(r)
    return te.if_then_else(te.all(r != zero, (x < zero) != (y < zero)), r - y, r)


@lowers(aten.atan2.default)
def atan2(ctx, node, a, b):
    return ctx.pointwise(te.atan2, [a, b])


@lowers(aten.hypot.default)
def hypot(ctx, node, a, b):
    return ctx.pointwise(te.hypot, [a, b])


@lowers(aten.fmax.default, aten.fmin.default)
def fmax_fmin(ctx, node, a, b):
    """The larger (smaller) of the two, a NaN ignored unless both are (maximum's propagates)."""
    pick = te.max if node.target is aten.fmax.default else te.min
    if not dt.is_float(ctx.dtype_of(node)):
        return ctx.pointwise(pick, [a, b])

    def fn(x, y):
        return te.if_then_else(x != x, y, te.if_then_else(y != y, x, pick(x, y)))

    return ctx.pointwise(fn, [a, b])


@lowers(aten.round.decimals)
def round_decimals(ctx, node, x, decimals=0):
    """torch's form: x * 10**d rounded half to even, / 10**d (d < 0: x / 10**-d, * 10**-d)."""
    x = ctx.lazy(x)
    if not dt.is_float(x.dtype):
        raise Unsupported("round(decimals=) of an integer tensor")
    largest = torch.finfo(TE_TO_TORCH[opmath_dtype(x.dtype)]).max
    # NOTE: torch's 10**d in the opmath type: inf past its range, so every result is NaN
    scale = 10.0 ** abs(decimals) if abs(decimals) <= 308 else math.inf  # (float64's range)
    scale = scale if scale <= largest else math.inf
    if decimals >= 0:
        fn = lambda v: te.round(v * scale) / scale  # noqa: E731
    else:
        fn = lambda v: te.round(v / scale) * scale  # noqa: E731
    return ctx.pointwise(fn, [x], jumps=True)


def _trunc(v):
    return te.if_then_else(v < te.const(0, v.dtype), te.ceil(v), te.floor(v))


def _compare(fn):
    def lower(ctx, node, a, b):
        compute = _common_dtype([a, b])
        if dt.is_half(compute):  # eager compares half values: a number is rounded to them too
            a, b = (_rounded_number(v, compute) for v in (a, b))
        return ctx.pointwise(fn, [a, b], compute=compute)

    return lower


for _op, _fn in [
    (aten.eq, lambda x, y: x == y),
    (aten.ne, lambda x, y: x != y),
    (aten.lt, lambda x, y: x < y),
    (aten.le, lambda x, y: x <= y),
    (aten.gt, lambda x, y: x > y),
    (aten.ge, lambda x, y: x >= y),
]:
    lowers(_op.Tensor, _op.Scalar)(_compare(_fn))


@lowers(aten.logical_and.default)  # (bitwise_and: lower_bits.py)
def logical_and(ctx, node, a, b):
    return ctx.pointwise(
        lambda x, y: te.all(x != _zero(x), y != _zero(y)), [a, b], compute=_common_dtype([a, b])
    )


@lowers(aten.logical_or.default)  # (bitwise_or: lower_bits.py)
def logical_or(ctx, node, a, b):
    return ctx.pointwise(
        lambda x, y: te.any(x != _zero(x), y != _zero(y)), [a, b], compute=_common_dtype([a, b])
    )


@lowers(aten.logical_xor.default)  # (bitwise_xor: lower_bits.py)
def logical_xor(ctx, node, a, b):
    return ctx.pointwise(
        lambda x, y: (x != _zero(x)) != (y != _zero(y)), [a, b], compute=_common_dtype([a, b])
    )


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, node, cond, a, b):
    dtype = ctx.dtype_of(node)
    cond = ctx.lazy(cond)
    ops = [cond, a, b]

    compute = opmath_dtype(dtype)  # a half choice is made in float32, as the chain around it

    def fn(c, x, y):
        return te.if_then_else(c.astype("bool"), in_dtype(x, compute), in_dtype(y, compute))

    return _mixed(ctx, fn, ops, [cond.dtype, compute, compute])


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(ctx, node, x, mask, value):
    x, mask = ctx.lazy(x), ctx.lazy(mask)
    compute = opmath_dtype(ctx.dtype_of(node))

    def fn(v, m, f):
        return te.if_then_else(m.astype("bool"), in_dtype(f, compute), in_dtype(v, compute))

    return _mixed(ctx, fn, [x, mask, value], [compute, mask.dtype, compute])


def _rounded_number(value, dtype: str):
    """A Python number as the nearest `dtype` value (2049 in float16: 2048; other operands
    unchanged)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return value
    return torch.tensor(value, dtype=TE_TO_TORCH[dtype]).item()


def _mixed(ctx, fn, ops, dtypes):
    """pointwise with each operand in its own dtype (ctx.pointwise casts all to one)."""
    wrapped = []
    for op, dtype in zip(ops, dtypes):
        if isinstance(op, Lazy):
            wrapped.append(op)
        else:
            wrapped.append(te.const(op, dtype) if not isinstance(op, te.Expr) else op)
    return ctx.pointwise(fn, wrapped, compute=NATIVE)


@lowers(aten._to_copy.default, aten.to.dtype, torch.ops.prims.convert_element_type.default)
def to_copy(ctx, node, x, *args, **kwargs):
    val = node.meta["val"]
    x = ctx.lazy(x)
    if val.device != node.args[0].meta["val"].device:
        raise Unsupported("a copy to another device")
    if kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        raise Unsupported("a copy to another memory format")
    dtype = ctx.dtype_of(node)
    if dtype == x.dtype:
        return x
    return ctx.pointwise(lambda v: v, [x], compute=x.dtype)


@lowers(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default)
def identity(ctx, node, x, **kwargs):
    if kwargs.get("memory_format") not in (None, torch.contiguous_format, torch.preserve_format):
        raise Unsupported("clone to another memory format")
    return ctx.lazy(x)


def _common_dtype(values) -> str:
    dtypes = []
    for v in values:
        if isinstance(v, Lazy):
            dtypes.append(v.dtype)
        elif isinstance(v, bool):
            dtypes.append("bool")
        elif isinstance(v, float):
            dtypes.append("float32")
        elif isinstance(v, int):
            dtypes.append("int64")
    order = ["bool", "uint8", "int8", "int16", "int32", "int64"]
    order += ["bfloat16", "float16", "float32", "float64"]
    tensor_dtypes = [v.dtype for v in values if isinstance(v, Lazy)]
    if {"bfloat16", "float16"} <= set(tensor_dtypes):
        return "float32"  # neither holds the other (torch promotes the two to float32)
    best = max(tensor_dtypes or dtypes, key=order.index)
    if any(dt.is_float(d) for d in dtypes) and not dt.is_float(best):
        best = "float32"
    return best


# -- constants made in the graph: full, arange, scalar_tensor ------------------------------------


@lowers(aten.full.default)
def full(ctx, node, size, value, **kwargs):
    dtype = ctx.dtype_of(node)
    return Lazy(ctx.shape_of(node), dtype, _filled(value, dtype), cost=0)


def _filled(value, dtype: str):
    """The index function of a constant: a literal, or a size known at run time (group norm's
    backward under dynamic shapes fills with its group's element count)."""
    if sym.is_size_expr(value):
        return lambda idx: value.astype(dtype)
    return lambda idx: te.const(value, dtype)


@lowers(aten.empty.memory_format)
def empty(ctx, node, size, **kwargs):
    """Uninitialized memory may hold anything: zeros (rrelu's noise in inference, which is
    never written, at run-time sizes where constant folding cannot make it)."""
    return full(ctx, node, None, 0)


@lowers(aten.full_like.default)
def full_like(ctx, node, x, value, **kwargs):
    """zeros_like, ones_like, full_like: a constant of the node's shape and dtype (the values
    hold no layout, so a memory format asks nothing)."""
    return full(ctx, node, None, value)


@lowers(aten.scalar_tensor.default)
def scalar_tensor(ctx, node, value, **kwargs):
    dtype = ctx.dtype_of(node)
    return Lazy((), dtype, _filled(value, dtype), cost=0)


@lowers(aten.arange.start_step, aten.arange.start, aten.arange.default)
def arange(ctx, node, *args, **kwargs):
    if node.target is aten.arange.default:
        start, step = 0, 1
    else:
        start, step = args[0], (args[2] if len(args) > 2 else 1)
    if not all(isinstance(v, (int, float)) for v in (start, step)):
        raise Unsupported("arange with symbolic bounds")
    dtype = ctx.dtype_of(node)

    def at(idx):
        (i,) = idx
        if isinstance(i, int):  # an axis of size 1 indexes with a plain 0 (a sequence of 1)
            return te.const(i * step + start, dtype)
        value = (
            i * step + start
            if dtype.startswith("int")
            else i.astype(dtype) * float(step) + float(start)
        )
        return value.astype(dtype) if value.dtype != dtype else value

    return Lazy(ctx.shape_of(node), dtype, at, cost=1)
