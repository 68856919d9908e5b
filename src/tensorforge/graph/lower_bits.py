"""Element-wise operators on bits and signs: bitwise and/or/xor and shifts of integers, copysign,
signbit, nextafter, ldexp, the angle of real numbers; clamp by tensors; rrelu in inference."""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.lower_pointwise import logical_and, logical_or, logical_xor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, Unsupported
from tensorforge.te import dtype as dt

aten = torch.ops.aten


def _bitwise(te_fn, logical):
    def lower(ctx, node, a, b):
        dtype = ctx.dtype_of(node)
        if dtype == "bool":  # of bools: the logical operator
            return logical(ctx, node, a, b)
        if not dt.is_int(dtype):
            raise Unsupported(f"{node.target} of {dtype}")
        a, b = (_wrapped(v, dtype) for v in (a, b))
        return ctx.pointwise(te_fn, [a, b], compute=dtype)

    return lower


def _wrapped(value, dtype: str):
    """A Python int as `dtype` holds it (300 in int8: 44), as torch wraps a scalar operand."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    return torch.tensor(value).to(getattr(torch, dtype)).item()


for _name, _fn, _logical in [
    ("bitwise_and", te.bitwise_and, logical_and),
    ("bitwise_or", te.bitwise_or, logical_or),
    ("bitwise_xor", te.bitwise_xor, logical_xor),
]:
    _op = getattr(aten, _name)
    _dunder = getattr(aten, f"__{_name.removeprefix('bitwise_')}__")
    lowers(_op.Tensor, _op.Scalar, _op.Scalar_Tensor, _dunder.Tensor, _dunder.Scalar)(
        _bitwise(_fn, _logical)
    )


def _shift_left(x, count):
    """torch's x << count: 0 where the count is negative or the type's width or more."""
    inside = _count_inside(count)
    zero = te.const(0, x.dtype)
    return te.if_then_else(inside, te.shift_left(x, te.if_then_else(inside, count, zero)), zero)


def _shift_right(x, count):
    """torch's x >> count: arithmetic of a signed type, so a count outside [0, width) fills
    with the sign (a shift by width - 1); of an unsigned one 0."""
    inside = _count_inside(count)
    if dt.is_unsigned(x.dtype):
        zero = te.const(0, x.dtype)
        return te.if_then_else(
            inside, te.shift_right(x, te.if_then_else(inside, count, zero)), zero
        )
    last = te.const(dt.bits_of(x.dtype) - 1, x.dtype)
    return te.shift_right(x, te.if_then_else(inside, count, last))


def _count_inside(count):
    bits = te.const(dt.bits_of(count.dtype), count.dtype)
    if dt.is_unsigned(count.dtype):
        return count < bits
    return te.all(count >= te.const(0, count.dtype), count < bits)


def _shift(te_fn):
    def lower(ctx, node, a, b):
        dtype = ctx.dtype_of(node)
        if not dt.is_int(dtype):
            raise Unsupported(f"a shift of {dtype}")
        a, b = (_wrapped(v, dtype) for v in (a, b))
        return ctx.pointwise(te_fn, [a, b], compute=dtype)

    return lower


lowers(
    aten.__lshift__.Tensor,
    aten.__lshift__.Scalar,
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
)(_shift(_shift_left))
lowers(
    aten.__rshift__.Tensor,
    aten.__rshift__.Scalar,
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
)(_shift(_shift_right))


@lowers(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(ctx, node, a, b):
    return ctx.pointwise(te.copysign, [a, b])


@lowers(aten.signbit.default)
def signbit(ctx, node, x):
    """The sign bit: set for -0.0 and a negative NaN too (copysign reads it)."""
    x = ctx.lazy(x)
    if dt.is_float(x.dtype):
        fn = lambda v: te.copysign(te.const(1, v.dtype), v) < te.const(0, v.dtype)  # noqa: E731
    elif dt.is_unsigned(x.dtype) or x.dtype == "bool":
        fn = lambda v: te.const(False, "bool")  # noqa: E731
    else:
        fn = lambda v: v < te.const(0, v.dtype)  # noqa: E731
    return ctx.pointwise(fn, [x], compute=x.dtype)


@lowers(aten.nextafter.default)
def nextafter(ctx, node, a, b):
    dtype = ctx.dtype_of(node)
    if dt.is_half(dtype):  # its steps are the half type's, not float32's
        raise Unsupported(f"nextafter of {dtype}")
    return ctx.pointwise(te.nextafter, [a, b], compute=dtype)


@lowers(aten.ldexp.Tensor)
def ldexp(ctx, node, x, exponent):
    """x 2^e, as C's ldexp (torch's on the CPU: inf 2^-200 is inf, where inf * pow(2, -200)
    is NaN): by three factors 2^(e/3), each finite and not 0, over e clamped where the result
    is 0 or inf already (float32's results span 2^-149 to 2^128)."""
    dtype = ctx.dtype_of(node)
    limit = 3000 if dtype == "float64" else 300

    def fn(v, e):
        e = te.max(te.min(e, te.const(limit, e.dtype)), te.const(-limit, e.dtype))
        third = te.floor(e / te.const(3.0, e.dtype))
        return v * te.exp2(third) * te.exp2(third) * te.exp2(e - third - third)

    compute = "float64" if dtype == "float64" else "float32"
    return ctx.pointwise(fn, [x, exponent], compute=compute)


@lowers(aten.angle.default)
def angle(ctx, node, x):
    """Of a real number: pi below 0, else 0 (-0.0 too); NaN stays NaN."""

    def fn(v):
        zero = te.const(0, v.dtype)
        return te.if_then_else(
            v < zero, te.const(math.pi, v.dtype), te.if_then_else(v != v, v, zero)
        )

    return ctx.pointwise(fn, [ctx.lazy(x)])


@lowers(aten.clamp.Tensor, aten.clamp_min.Tensor, aten.clamp_max.Tensor)
def clamp_tensor(ctx, node, x, lo=None, hi=None):
    """min(max(x, lo), hi), NaN anywhere giving NaN (so hi where lo > hi, as torch)."""
    if node.target is aten.clamp_max.Tensor:
        lo, hi = None, lo
    bounds = [v for v in (lo, hi) if v is not None]
    if not all(isinstance(v, Lazy) for v in bounds):
        raise Unsupported("clamp by a bound that is not a tensor")

    def fn(v, *limits):
        limits = list(limits)
        if lo is not None:
            v = te.max(v, limits.pop(0))
        if hi is not None:
            v = te.min(v, limits.pop(0))
        return v

    return ctx.pointwise(fn, [ctx.lazy(x), *bounds])


@lowers(aten.rrelu_with_noise_functional.default, aten.rrelu_with_noise.default)
def rrelu_eval(ctx, node, x, noise, lower=0.125, upper=1 / 3, training=False, generator=None):
    """Not training: leaky relu with slope (lower + upper) / 2; the noise is left as it was
    (the functional form returns it as its second output)."""
    if training:
        raise Unsupported("rrelu in training (random slopes)")
    slope = (lower + upper) / 2
    zero = lambda v: te.const(0, v.dtype)  # noqa: E731
    functional = node.target is aten.rrelu_with_noise_functional.default
    out = ctx.pointwise(
        lambda v: te.if_then_else(v > zero(v), v, v * slope),
        [ctx.lazy(x)],
        shape=ctx.shape_of(node, 0 if functional else None),
        dtype=ctx.dtype_of(node, 0 if functional else None),
    )
    return (out, ctx.lazy(noise)) if functional else out
