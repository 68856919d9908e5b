"""Special functions as te expressions: erfinv (Giles' float32 approximation), ndtri (Acklam's
rational approximations), lgamma
and digamma (shifted up, Stirling's and the asymptotic series, reflected below), the modified
Bessel functions i0, i0e, i1, i1e (the power series, the asymptotic one for large |x|).

ndtri, lgamma, digamma and the Bessel functions compute in float64 and round once: their shifts and
reflections cancel (lgamma near 1 and 2, digamma near its root), which float64 absorbs, so the
float32 (and half) results are within an ulp or two of float64 torch's. A float64 input runs
eagerly: these series are not accurate to float64's last bits.
"""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import Unsupported
from tensorforge.te import dtype as dt

aten = torch.ops.aten


def _c(value: float, like) -> te.Expr:
    return te.const(value, like.dtype)


def _horner(coefficients, w):
    """coefficients[0] * w**(n-1) + ... + coefficients[-1]."""
    p = _c(coefficients[0], w)
    for a in coefficients[1:]:
        p = p * w + _c(a, w)
    return p


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single precision
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # fmt: skip
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip


def _erfinv_from(w, x):
    """erfinv(x) given w = -log(1 - x**2) (computed from the caller's exact pieces): x times a
    polynomial in w, or in sqrt(w) for the tails; +-inf at +-1, NaN past them."""
    central = _horner(_ERFINV_CENTRAL, w - _c(2.5, w))
    tail = _horner(_ERFINV_TAIL, te.sqrt(w) - _c(3.0, w))
    value = te.if_then_else(w < _c(5.0, w), central, tail) * x
    infinite = te.copysign(_c(math.inf, x), x)
    return te.if_then_else(w == _c(math.inf, w), infinite, value)


def erfinv(x):
    one = _c(1.0, x)
    return _erfinv_from(-te.log((one - x) * (one + x)), x)


# Acklam's rational approximations of the normal quantile (relative error 1.2e-9): the
# center, |p - 0.5| <= 0.5 - 0.02425, and the tails, in sqrt(-2 log(p)) (or of 1 - p)
_NDTRI_CENTER = ((-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
                  1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00),
                 (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
                  6.680131188771972e01, -1.328068155288572e01, 1.0))  # fmt: skip
_NDTRI_TAIL = ((-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
                -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00),
               (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
                3.754408661907416e00, 1.0))  # fmt: skip
_NDTRI_LOW = 0.02425


def ndtri(p):
    """The standard normal quantile (float64: 1 - p is exact for a float32 p, so the upper
    tail keeps its bits); -inf at 0, inf at 1, NaN outside [0, 1]."""
    half, one = _c(0.5, p), _c(1.0, p)
    q = p - half
    r = q * q
    center = q * _horner(_NDTRI_CENTER[0], r) / _horner(_NDTRI_CENTER[1], r)
    upper = p > half
    t = te.sqrt(_c(-2.0, p) * te.log(te.if_then_else(upper, one - p, p)))
    tail = _horner(_NDTRI_TAIL[0], t) / _horner(_NDTRI_TAIL[1], t)
    tail = te.if_then_else(upper, -tail, tail)
    value = te.if_then_else(te.abs(q) <= _c(0.5 - _NDTRI_LOW, p), center, tail)
    value = te.if_then_else(p == _c(0.0, p), _c(-math.inf, p), value)
    return te.if_then_else(p == one, _c(math.inf, p), value)


def _sinpi_abs(x):
    """|sin(pi x)|, reduced by the nearest integer first (exact), so large x keep their bits."""
    return te.abs(te.sin(_c(math.pi, x) * (x - te.round(x))))


# B_2k / (2k (2k - 1)), the last first
_STIRLING = (
    -3617 / 122400,
    1 / 156,
    -691 / 360360,
    1 / 1188,
    -1 / 1680,
    1 / 1260,
    -1 / 360,
    1 / 12,
)
# -B_2k / 2k
_DIGAMMA = (3617 / 8160, -1 / 12, 691 / 32760, -1 / 132, 1 / 240, -1 / 252, 1 / 120, -1 / 12)


def _stirling(z):
    """lgamma(z) for z >= 8: Stirling's series to z**-15 (the next term below 1e-16)."""
    zi = _c(1.0, z) / z
    zi2 = zi * zi
    series = zi * _horner(_STIRLING, zi2)
    return (z - _c(0.5, z)) * te.log(z) - z + _c(0.5 * math.log(2 * math.pi), z) + series


def _steps_below(y, bound: int):
    """The n in [0, bound] that takes y >= 0 to y + n >= bound: ceil(bound - y), clamped."""
    return te.max(te.min(te.ceil(_c(bound, y) - y), _c(bound, y)), _c(0.0, y))


def _lgamma_core(y, eight):
    """lgamma(y), y >= 0.5: lgamma(y + n) - log(y (y + 1) ... (y + n - 1)), y + n >= 8."""
    one = _c(1.0, y)
    product = one
    for k in range(8):  # (each factor a choice of its own: a chain of choices nests 3**8 deep)
        product = product * te.if_then_else(y + _c(k, y) < eight, y + _c(k, y), one)
    return _stirling(y + _steps_below(y, 8)) - te.log(product)


def lgamma(x, y):
    """Of y = x (x >= 0.5) or 1 - x (reflected: log(pi / |sin(pi x)|) - lgamma(1 - x)), shifted
    to z = y + n >= 8: lgamma(z) - log(y (y + 1) ... (y + n - 1)); inf at 0, at the negative
    integers and at +-inf, exactly 0 at 1 and 2."""
    half, one, eight = _c(0.5, x), _c(1.0, x), _c(8.0, x)
    reflect = x < half
    core = _lgamma_core(y, eight)
    reflected = te.log(_c(math.pi, x) / _sinpi_abs(x)) - core
    value = te.if_then_else(reflect, reflected, core)
    inf = _c(math.inf, x)
    pole = te.any(te.all(x <= _c(0.0, x), te.floor(x) == x), te.abs(x) == inf)
    value = te.if_then_else(pole, inf, value)
    return te.if_then_else(te.any(x == one, x == _c(2.0, x)), _c(0.0, x), value)


def _digamma_core(y, ten):
    """digamma(y), y >= 0: the asymptotic series at z = y + n >= 10 (to z**-16), less 1/y + ... + 1/(z - 1)."""
    zero, one = _c(0.0, y), _c(1.0, y)
    shifted = zero
    for k in range(10):
        shifted = shifted + te.if_then_else(y + _c(k, y) < ten, one / (y + _c(k, y)), zero)

    def asymptotic(z):
        zi = one / z
        zi2 = zi * zi
        series = zi2 * _horner(_DIGAMMA, zi2)
        return te.log(z) - _c(0.5, z) * zi + series

    return asymptotic(y + _steps_below(y, 10)) - shifted


def digamma(x, y):
    """Of y = x (x >= 0) or 1 - x (reflected: digamma(1 - x) - pi / tan(pi x)), shifted to
    z >= 6: the asymptotic series less 1/y + ... + 1/(y + n - 1); -inf at +0, inf at -0 and
    NaN at the negative integers and -inf, as torch."""
    zero = _c(0.0, x)
    reflect = x < zero
    core = _digamma_core(y, _c(10.0, x))
    pi = _c(math.pi, x)
    reflected = core - pi / te.tan(pi * (x - te.round(x)))
    value = te.if_then_else(reflect, reflected, core)
    value = te.if_then_else(te.all(reflect, te.floor(x) == x), _c(math.nan, x), value)
    at_zero = te.copysign(_c(math.inf, x), -x)  # (-inf at +0, inf at -0)
    return te.if_then_else(x == zero, at_zero, value)


_SERIES_TERMS = 36  # q**k / (k! (k + order)!) below 1e-18 of the sum for |x| <= 15
_ASYMPTOTIC_TERMS = 16  # the asymptotic series' terms past 15: below 1e-12 of the sum
_LARGE = 15.0


def _bessel(x, order: int, scaled: bool):
    """I_order(x) (order 0 or 1), times exp(-|x|) where `scaled`: the power series
    (x/2)**order sum (x**2/4)**k / (k! (k + order)!) up to |x| = 15, past it
    exp(|x|) / sqrt(2 pi |x|) sum (-1)**k a_k(order) / |x|**k."""
    ax = te.abs(x)
    q = ax * ax * _c(0.25, x)
    series = [1 / (math.factorial(k) * math.factorial(k + order)) for k in range(_SERIES_TERMS)]
    small = _horner(series[::-1], q)
    if order == 1:
        small = small * ax * _c(0.5, x)
    mu = 4.0 * order * order
    terms, a = [1.0], 1.0
    for k in range(1, _ASYMPTOTIC_TERMS):
        a *= -(mu - (2 * k - 1) ** 2) / (k * 8.0)
        terms.append(a)
    inverse = _c(1.0, x) / ax
    large = _horner(terms[::-1], inverse) / te.sqrt(_c(2 * math.pi, x) * ax)
    if scaled:
        small = small * te.exp(-ax)
    else:
        large = large * te.exp(ax)
    value = te.if_then_else(ax <= _c(_LARGE, x), small, large)
    if order == 1:  # odd: the sign of x
        value = te.if_then_else(x < _c(0.0, x), -value, value)
    return value


SPECIAL = {
    aten.erfinv.default: (erfinv, "float32"),
    aten.special_ndtri.default: (ndtri, "float64"),
    aten.lgamma.default: (lgamma, "float64"),
    aten.digamma.default: (digamma, "float64"),
    aten.i0.default: (lambda x: _bessel(x, 0, False), "float64"),
    aten.special_i0e.default: (lambda x: _bessel(x, 0, True), "float64"),
    aten.special_i1.default: (lambda x: _bessel(x, 1, False), "float64"),
    aten.special_i1e.default: (lambda x: _bessel(x, 1, True), "float64"),
}


# eager on CPU targets, where torch's own vectorized kernels are faster than these float64
# series (1M float32 elements, 1 thread, Zen 5: lgamma 20.3 ms against eager's 4.2, i1e 3.9
# against 1.9; the others are 1.6-6x faster than eager)
eager_on_cpu(aten.lgamma.default, aten.special_i1e.default)


@lowers(*SPECIAL)
def special(ctx, node, x):
    fn, compute = SPECIAL[node.target]
    dtype = ctx.dtype_of(node)
    if dtype == "float64":
        raise Unsupported(f"{node.target} of float64 (the series are float32-accurate)")
    if not dt.is_float(dtype):
        raise Unsupported(f"{node.target} of {dtype}")
    x = ctx.lazy(x)
    if fn in (lgamma, digamma):  # the reflected argument, y = 1 - x below `low`, read from
        # memory: used in each of the shifts' terms, inlined it made kernels of minutes to build
        low = 0.5 if fn is lgamma else 0.0

        def reflected(v):
            return te.if_then_else(v < _c(low, v), _c(1.0, v) - v, v)

        y = ctx.materialize(ctx.pointwise(reflected, [x], dtype=compute, compute=compute))
        return ctx.pointwise(fn, [x, y], compute=compute)
    return ctx.pointwise(fn, [x], compute=compute)
