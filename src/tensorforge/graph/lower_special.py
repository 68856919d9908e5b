"""Special functions as te expressions: erfinv (Giles' float32 approximation), ndtri (Acklam's
rational approximations), lgamma
and digamma (shifted up, Stirling's and the asymptotic series, reflected below), the modified
Bessel functions i0, i0e, i1, i1e (the power series, the asymptotic one for large |x|).

ndtri, lgamma, digamma and the Bessel functions compute in float64 and round once: their shifts and
reflections cancel (lgamma near 1 and 2, digamma near its root), which float64 absorbs, so the
float32 (and half) results are within an ulp or two of float64 torch's. A float64 input runs
eagerly: these series are not accurate to float64's last bits. On CPU targets lgamma computes in
float32 instead (`lgamma_float32`: series that do not cancel; float64's logs are the C
library's there, lane by lane, 5x slower than eager).

trigamma (polygamma of order 1) is torch's calc_trigamma in the input's type (float64 too), as
eager computes it, so its poles and rounding follow eager's (1M float32, 1 thread, load ~7:
4.5 ms against eager's 19.1).
"""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Unsupported, let
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


# lgamma(1 + e) = -gamma e + sum_k (-1)**k zeta(k) / k e**k and lgamma(2 + e) = (1 - gamma) e
# + sum_k (-1)**k (zeta(k) - 1) / k e**k (Taylor, |e| <= 1/2: the first to e**25, the second to
# e**15, each within 3e-9 relative there), the last first, divided by e; about lgamma's minimum
# (at MINIMUM, float32's nearest), lgamma(MINIMUM + t) - lgamma(MINIMUM) to t**11, divided by t
# (within 4e-10 for |t| <= 0.3); mpmath's values
_LGAMMA_AT_1 = (-0.04000000119214014, 0.04166666915034121, -0.04347826605304026,
                0.04545455629320467, -0.047619070330142226, 0.05000004769810169,
                -0.05263167937961666, 0.055555767627403614, -0.058823978658684585,
                0.06250095514121304, -0.06666870588242046, 0.07143294629536133,
                -0.0769325164113522, 0.083353840546109, -0.09095401714582904,
                0.1000994575127818, -0.11133426586956469, 0.12550966952474304,
                -0.1440498967688461, 0.1695571769974082, -0.20738555102867398,
                0.27058080842778454, -0.40068563438653143, 0.8224670334241132,
                -0.5772156649015329)  # fmt: skip
_LGAMMA_AT_2 = (-2.039215753801366e-06, 4.374866789907488e-06, -9.439488275268397e-06,
                2.050721277567069e-05, -4.492623673813314e-05, 9.945751278180853e-05,
                -0.00022315475845357939, 0.0005096695247430425, -0.001192753911703261,
                0.0028905103307415234, -0.007385551028673986, 0.020580808427784546,
                -0.0673523010531981, 0.3224670334241132, 0.42278433509846713)  # fmt: skip
MINIMUM, LGAMMA_MINIMUM = 1.4616321325302124, -0.12148629053584953
_LGAMMA_AT_MINIMUM = (-0.0014022515769875278, 0.0022597650150773707, -0.003684569889389322,
                      0.006100536432980967, -0.010314223643671462, 0.01797067601323939,
                      -0.03278854242961305, 0.06462494227805675, -0.14758772620978955,
                      0.48383612823096533, -1.203605254910667e-08)  # fmt: skip
# sin(pi r) / r = sum_k (-1)**k pi**(2k+1) / (2k+1)! r**2k, |r| <= 1/2 (to r**14: 2e-10)
_SINPI = tuple((-1) ** k * math.pi ** (2 * k + 1) / math.factorial(2 * k + 1) for k in range(8))[
    ::-1
]


def _lgamma_near_minimum(e1):
    """lgamma(1 + e1) for e1 in [-0.5, 1.5): the Taylor series about 1 below 1.23, about the
    minimum below 1.73, about 2 above; no term cancels (lgamma's zeros at 1 and 2 keep their
    relative accuracy). e1 itself (not 1 + e1, rounded) keeps a small argument's bits."""
    e0, e2 = (e1 + _c(1.0, e1)) - _c(MINIMUM, e1), e1 - _c(1.0, e1)  # (exact where used)
    at_one = e1 * _horner(_LGAMMA_AT_1, e1)
    at_minimum = e0 * _horner(_LGAMMA_AT_MINIMUM, e0) + _c(LGAMMA_MINIMUM, e1)
    at_two = e2 * _horner(_LGAMMA_AT_2, e2)
    return te.if_then_else(
        e1 < _c(0.23, e1), at_one, te.if_then_else(e1 < _c(0.73, e1), at_minimum, at_two)
    )


def lgamma_float32(x):
    """lgamma in float32 arithmetic (CPU targets, where float64's logs are the C library's,
    lane by lane), with no shift that cancels: of a = |x|, Taylor series for a in [0.5, 2.5)
    (`_lgamma_near_minimum`), a in [2.5, 8) lowered to t = a - n in [1.5, 2.5) by the log of the
    factors (a - 1) ... (a - n), all positive and exact, Stirling's series from 8;
    |x| < 0.5: lgamma(1 + x) - log |x|; x <= -0.5: the reflection
    log(pi / |x sin(pi x)|) - lgamma(-x). Within 2.5 ulp of float64 for x > -2 (2.3 measured
    over benchmarks/bench_special_functions.py's domain; eager's 0.8); below, within a few ulp
    of max(|lgamma(x)|, 1), so near lgamma's zeros there (-2.457, -2.747, ...) many ulp of the
    value (eager's float32: up to 84 ulp there)."""
    return let(x, "lgamma_x", _lgamma_float32)


def _lgamma_float32(x):
    one, half, eight = _c(1.0, x), _c(0.5, x), _c(8.0, x)
    a = te.abs(x)
    small = a < half
    product = one  # (a - 1) ... (a - n), n the steps down to [1.5, 2.5): 0 below 2.5
    for k in range(1, 7):
        product = product * te.if_then_else(a >= _c(k + 1.5, x), a - _c(k, x), one)
    return let(
        te.log(
            te.if_then_else(small, a, te.if_then_else(a >= eight, a * _c(1 / math.e, x), product))
        ),
        "lgamma_log",
        lambda logged: _lgamma_from(x, a, small, logged),
    )


def _lgamma_from(x, a, small, logged):
    one, half, eight = _c(1.0, x), _c(0.5, x), _c(8.0, x)
    steps = te.max(te.min(te.floor(a - _c(1.5, x)), _c(6.0, x)), _c(0.0, x))
    # (each shared value used once in the tree: the passes walk it as a tree, not a graph)
    base = let(te.if_then_else(small, x, a - steps - one), "lgamma_e", _lgamma_near_minimum)
    zi = one / a
    series = zi * _horner((1 / 1260, -1 / 360, 1 / 12), zi * zi)
    # (logged: log(a / e) from 8, where log(a) - 1 would carry log's error (a ulp) and
    # cancel: 2.4 ulp at 11; 1.x so)
    stirling = (a - half) * logged + _c(0.5 * math.log(2 * math.pi) - 0.5, x) + series
    core = te.if_then_else(  # lgamma(a) for a >= 0.5, lgamma(1 + x) - log |x| below
        a < eight, base + te.if_then_else(small, -logged, logged), stirling
    )
    r = x - te.round(x)
    sinpi = te.abs(x * r * _horner(_SINPI, r * r))  # |x sin(pi x)|
    reflect = x <= -half
    value = te.if_then_else(reflect, -core, core) + te.if_then_else(
        reflect, te.log(_c(math.pi, x) / sinpi), _c(0.0, x)
    )
    inf = _c(math.inf, x)
    pole = te.any(te.all(x <= _c(0.0, x), te.floor(x) == x), a == inf)
    return te.if_then_else(pole, inf, value)


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


def trigamma(x):
    """polygamma(1, x) as torch's calc_trigamma: reflected below 1/2 (pi**2 / sin(pi x)**2 less
    trigamma(1 - x)), 6 shifts up, then the asymptotic series; computed in the input's type,
    as eager's (so its poles match: inf at 0, huge at the negative integers, where sin is not
    quite 0)."""
    one = _c(1.0, x)
    reflect = x < _c(0.5, x)

    def from_y(y):
        total = None
        for k in range(6):
            z = y + _c(float(k), x)
            term = one / (z * z)
            total = term if total is None else total + term

        def tail(z):
            ixx = one / (z * z)
            inner = _c(1 / 6, x) - ixx * (_c(1 / 30, x) - ixx * _c(1 / 42, x))
            return (one + one / (_c(2.0, x) * z) + ixx * inner) / z

        return total + let(y + _c(6.0, x), "z", tail)

    value = let(te.if_then_else(reflect, one - x, x), "y", from_y)
    pi = _c(math.pi, x)
    sine = let(te.sin(pi * x), "sine", lambda s: s * s)
    return te.if_then_else(reflect, pi * pi / sine - value, value)


@lowers(aten.polygamma.default)
def polygamma(ctx, node, n, x):
    """polygamma of order 1 (trigamma); order 0 is digamma's lowering (decomposed), higher
    orders (torch's Hurwitz zeta, a loop as long as the argument is negative) run eagerly."""
    dtype = ctx.dtype_of(node)
    if n != 1 or not dt.is_float(dtype):
        raise Unsupported(f"polygamma of order {n} of {dtype}")
    compute = "float64" if dtype == "float64" else "float32"
    return ctx.pointwise(lambda v: let(v, "x", trigamma), [ctx.lazy(x)], compute=compute)


_SERIES_TERMS = 36  # q**k / (k! (k + order)!) below 1e-18 of the sum for |x| <= 15
_ASYMPTOTIC_TERMS = 16  # the asymptotic series' terms past 15: below 1e-12 of the sum
_LARGE = 15.0


def _bessel(x, order: int, scaled: bool, large_from: float = _LARGE):
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
    value = te.if_then_else(ax <= _c(large_from, x), small, large)
    if order == 1:  # odd: the sign of x
        value = te.if_then_else(x < _c(0.0, x), -value, value)
    return value


# float32 lanes i1e_float32 needs to beat eager's vectorized i1e: 1M elements, 1 thread, Zen 5,
# its kernel for AVX-512 1.04 ms, for AVX2 (-mcpu=znver3, x86-64-v3) 2.9, eager 1.9-2.0 with
# either of torch's kernels (ATEN_CPU_CAPABILITY=avx2 too)
I1E_LANES = 16


def i1e_float32(x):
    """i1e in float32 arithmetic (CPU targets: eager's is a vectorized float32 Chebyshev fit,
    2x the float64 series' speed): the power series up to |x| = 9, the asymptotic one past it
    (its 16 terms within 1e-8 there; float32's power series at 9-15, ~40 ulp of terms summed,
    took 6.8 ulp). Within 4 ulp of float64 (eager: 9.6)."""
    return _bessel(x, 1, True, large_from=9.0)


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


# On CPU targets lgamma and i1e compute in float32 (lgamma_float32, i1e_float32): float64 there is
# the C library's logs and exps lane by lane, slower than eager's vectorized float32 (1M
# elements, 1 thread: lgamma 20.3 ms against eager's 4.2, i1e 3.9 against 1.9; in float32 3.3
# against 8.0 and 1.04 against 2.0, session 18); the others are 1.6-6x faster than eager.


@lowers(*SPECIAL)
def special(ctx, node, x):
    fn, compute = SPECIAL[node.target]
    dtype = ctx.dtype_of(node)
    if dtype == "float64":
        raise Unsupported(f"{node.target} of float64 (the series are float32-accurate)")
    if not dt.is_float(dtype):
        raise Unsupported(f"{node.target} of {dtype}")
    x = ctx.lazy(x)
    if fn is lgamma and ctx.target.kind == "llvm":
        return ctx.pointwise(lgamma_float32, [x], compute="float32")
    if node.target is aten.special_i1e.default and ctx.target.kind == "llvm":
        if ctx.target.vector_lanes("float32") < I1E_LANES:
            raise Unsupported(f"{node.target} on a CPU of {ctx.target.vector_bits}-bit vectors")
        return ctx.pointwise(lambda v: let(v, "x", i1e_float32), [x], compute="float32")
    if fn in (lgamma, digamma):  # the reflected argument, y = 1 - x below `low`, read from
        # memory: used in each of the shifts' terms, inlined it made kernels of minutes to build
        low = 0.5 if fn is lgamma else 0.0

        def reflected(v):
            return te.if_then_else(v < _c(low, v), _c(1.0, v) - v, v)

        y = ctx.materialize(ctx.pointwise(reflected, [x], dtype=compute, compute=compute))
        return ctx.pointwise(fn, [x, y], compute=compute)
    return ctx.pointwise(fn, [x], compute=compute)
