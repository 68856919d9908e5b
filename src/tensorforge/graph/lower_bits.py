"""Element-wise operators on bits and signs: bitwise and/or/xor and shifts of integers, copysign,
signbit, nextafter, frexp, ldexp, the angle of real numbers; clamp by tensors; rrelu in inference.

te has no view of a float's bits, so a float's exponent and mantissa are found by exact
scalings (`normalized`), and a half type's next float follows from them."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from tensorforge import te
from tensorforge.graph.lower_pointwise import logical_and, logical_or, logical_xor
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Lazy, Unsupported, let
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


# (mantissa bits, least exponent of a normal number, greatest finite) of the half types
HALF_FLOATS = {"float16": (10, -14, 65504.0), "bfloat16": (7, -126, 3.3895313892515355e38)}


def normalized(u, body: Callable[[te.Expr, te.Expr], te.Expr]) -> te.Expr:
    """body(m, E) for a finite u > 0, with u = m 2^E, m in [1, 2) and E a whole number (a float
    of u's dtype), in exact steps: u >= 2^k (k = 64, 32, ..., 1) scaled by 2^-k, then u <
    2^(1-k) by 2^k, each step a compare, a select and a multiply on every lane. (floor(log2(u)),
    corrected by exp2 either side, took 2.5x eager's frexp.) A subnormal (float32 below 2^-64,
    float64 below 2^-960) is first scaled by 2^64 (2^128): the steps cover exponents up to 127
    (1023) either way. Each step binds variables: the loop IR's passes walk trees."""
    c = lambda v: te.const(v, u.dtype)  # noqa: E731
    wide = u.dtype == "float64"
    shift, below = (128, 2.0**-960) if wide else (64, 2.0**-64)
    steps = [2**j for j in range(9 if wide else 6, -1, -1)]

    def step(k: int, down: bool, rest: Callable):
        def apply(m, e):
            move = m >= c(2.0**k) if down else m < c(2.0 ** (1 - k))
            scaled = te.if_then_else(move, m * c(2.0 ** (-k if down else k)), m)
            moved = te.if_then_else(move, e + c(k if down else -k), e)
            return let(scaled, "m", lambda m: let(moved, "e", lambda e: rest(m, e)))

        return apply

    chain = body  # built inside out: the first step the outermost
    for down in (False, True):
        for k in reversed(steps):
            chain = step(k, down, chain)
    small = u < c(below)
    start = te.if_then_else(small, u * c(2.0**shift), u)
    first = te.if_then_else(small, c(-shift), c(0))
    return let(start, "m", lambda m: let(first, "e", lambda e: chain(m, e)))


def _value_dtype(node, k: int = 0) -> torch.dtype | None:
    val = node.args[k].meta.get("val") if hasattr(node.args[k], "meta") else None
    return getattr(val, "dtype", None)


# 1M elements, 1 thread, load ~6 on 2 cores (benchmarks/bits.py --kernels): frexp of float64
# eager 3.3 ms against 7.5 (20 steps of 8 lanes, in two kernels; float32 3.2 against 1.8, half
# 3.8 against 1.7); nextafter of float32 eager 0.59 against 17.9 (the C library's nextafterf lane
# by lane; eager steps the bits in vectors), of float16 / bfloat16 12.7 / 11.9 against 2.0 / 3.7
eager_on_cpu(aten.frexp.Tensor, when=lambda n: _value_dtype(n) == torch.float64, what="of float64")
eager_on_cpu(
    aten.nextafter.default,
    when=lambda n: _value_dtype(n) in (torch.float32, torch.float64),
    what="of float32 / float64",
)


@lowers(aten.frexp.Tensor)
def frexp(ctx, node, x):
    """(mantissa, exponent) with x = mantissa 2^exponent, |mantissa| in [0.5, 1), the
    exponent int32; 0, inf and NaN are their own mantissa, exponent 0 (as C's frexp). A half
    type computes in float32 (its values, exactly); float64 in float64."""
    x = ctx.lazy(x)
    if not dt.is_float(x.dtype):
        raise Unsupported(f"frexp of {x.dtype}")
    compute = "float64" if x.dtype == "float64" else "float32"

    def special(v):  # 0, inf, NaN
        return te.any(v == te.const(0, v.dtype), te.abs(v) == te.const(math.inf, v.dtype), v != v)

    def exponent(v):
        e = normalized(te.abs(v), lambda m, e: e + te.const(1, v.dtype))
        return te.if_then_else(special(v), te.const(0, v.dtype), e)

    def mantissa(v):
        m = normalized(te.abs(v), lambda m, e: m * te.const(0.5, v.dtype))
        return te.if_then_else(special(v), v, te.copysign(m, v))

    return (
        ctx.pointwise(
            lambda v: let(v, "x", mantissa),
            [x],
            shape=x.shape,
            dtype=x.dtype,
            compute=compute,
            jumps=True,
        ),
        ctx.pointwise(
            lambda v: let(v, "x", exponent),
            [x],
            shape=x.shape,
            dtype="int32",
            compute=compute,
            jumps=True,
        ),
    )


@lowers(aten.nextafter.default)
def nextafter(ctx, node, a, b):
    dtype = ctx.dtype_of(node)
    if dt.is_half(dtype):
        step = _half_nextafter(*HALF_FLOATS[dtype])
        fn = lambda x, y: let(x, "x", lambda x: let(y, "y", lambda y: step(x, y)))  # noqa: E731
        return ctx.pointwise(fn, [a, b], compute="float32", jumps=True)  # (rounded operands)
    return ctx.pointwise(te.nextafter, [a, b], compute=dtype)


def _half_nextafter(bits: int, least: int, greatest: float):
    """nextafter of a half type's values held in float32 (exactly): the step next to x is
    2^(E - bits) for x in [2^E, 2^(E + 1)) (E no less than `least`: the subnormals' even steps),
    half that below an exact power of two when stepping towards 0; past the greatest finite
    the float32 sum rounds to inf in the half type, and inf steps back to it."""

    def fn(x, y):
        c = lambda v: te.const(v, x.dtype)  # noqa: E731
        u = te.abs(x)

        def moved(m, e):
            step = te.exp2(e - c(bits))
            outward = (y > x) == (x > c(0))  # away from 0
            at_power = te.all(m == c(1), e > c(least))
            inward = te.if_then_else(at_power, u - step * c(0.5), u - step)
            inward = te.if_then_else(u == c(math.inf), c(greatest), inward)
            return te.copysign(te.if_then_else(outward, u + step, inward), x)

        normal = normalized(te.max(u, c(2.0**least)), moved)
        tiny = te.copysign(c(2.0 ** (least - bits)), y)  # from 0, either sign
        result = te.if_then_else(u == c(0), tiny, normal)
        result = te.if_then_else(x == y, y, result)
        return te.if_then_else(te.any(x != x, y != y), x + y, result)

    return fn


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
