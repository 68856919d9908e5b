"""float32 sin, cos and tan as LLVM IR polynomials (llvm_math's helpers call these bodies): the
argument reduced to r in [-pi/4, pi/4] and a quadrant k by x = k pi/2 + r, then sin r or cos r
chosen and signed by k (tan: their quotient). A loop of libm's sinf per lane ran 2-5x slower than eager torch's
vectorized sin; this is plain vector arithmetic.

The reduction subtracts k pi/2 in three parts (PIO2_HI has 24 bits, so k * PIO2_HI is exact in
an FMA and, for |x| >= 1, x - k * PIO2_HI is too: both are multiples of 2**-23 under 2), which
holds r to float32's precision while |x| < FAST_LIMIT. Lanes past it, and inf and NaN, send the
vector to libm's sinf / cosf / tanf per lane (a branch typical data never takes). Accuracy
against float64: sin and cos within 2 ulp (1.5 of 1 near sin's zeros), tan within 3
(tests/codegen/test_llvm_trig.py).
"""

from __future__ import annotations

PIO2_HI = 1.57079637050628662109375  # pi / 2 rounded to float32
PIO2_MID = -4.371139000186241e-08  # the rest, rounded to float32
PIO2_LO = -1.7151245100059164e-15  # and the rest of that
TWO_OVER_PI = 0.636619772367581343
ROUND_MAGIC = 12582912.0  # 1.5 * 2**23: adding it rounds to an integer held in the low bits
FAST_LIMIT = 1.0e5  # |x| below which the reduction is exact enough (k < 2**16)
# minimax polynomials on [-pi/4, pi/4] (Cephes sinf / cosf's coefficients)
SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)  # sin r = r + r^3 P(r^2)
COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
# cos r = 1 - r^2 / 2 + r^4 Q(r^2)


def sin(m, x):
    return _sin_cos(m, x, quarter=0, libm="sinf")


def cos(m, x):
    return _sin_cos(m, x, quarter=1, libm="cosf")


def tan(m, x):
    """sin r / cos r in even quadrants, -cos r / sin r in odd ones (r's sign carries tan's)."""
    k, quadrant, r = _reduce(m, x)
    sine, cosine = _sin_cos_of(m, r)
    odd = m.b.icmp_signed("!=", m.b.and_(quadrant, m.i(1)), m.i(0))
    fast = m.divide(m.select(odd, m.b.fneg(cosine), sine), m.select(odd, sine, cosine))
    fast = m.select(m.cmp("==", x, m.f(0.0)), x, fast)  # (tan(-0) = -0)
    inside = m.cmp("<", m.call("llvm.fabs", x), m.f(FAST_LIMIT))  # (false for NaN)
    return m.unlikely_branch(m.every_lane(inside), fast, lambda: m.per_lane_libm("tanf", x))


def _reduce(m, x):
    """x = k pi/2 + r: (k as a float, k's bits in the low bits of an int, r)."""
    shifted = m.fma(x, m.f(TWO_OVER_PI), m.f(ROUND_MAGIC))  # low bits: k = round(x 2 / pi)
    k = m.sub(shifted, m.f(ROUND_MAGIC))
    r = m.fma(k, m.f(-PIO2_HI), x)
    r = m.fma(k, m.f(-PIO2_MID), r)
    r = m.fma(k, m.f(-PIO2_LO), r)
    return k, m.as_int(shifted), r


def _sin_cos_of(m, r):
    """(sin r, cos r) for r in [-pi/4, pi/4]."""
    r2 = m.mul(r, r)
    sine = m.fma(m.mul(r, r2), m.poly(r2, SIN_POLY), r)
    cosine = m.fma(m.mul(r2, r2), m.poly(r2, COS_POLY), m.fma(r2, m.f(-0.5), m.f(1.0)))
    return sine, cosine


def _sin_cos(m, x, quarter: int, libm: str):
    """sin x (quarter 0) or cos x = sin(x + pi/2) (quarter 1: the quadrant one further)."""
    _, bits, r = _reduce(m, x)
    sine, cosine = _sin_cos_of(m, r)
    quadrant = m.b.add(bits, m.i(quarter))  # (the magic's low bits are 0)
    odd = m.b.icmp_signed("!=", m.b.and_(quadrant, m.i(1)), m.i(0))
    value = m.select(odd, cosine, sine)
    sign = m.b.shl(m.b.and_(quadrant, m.i(2)), m.i(30))  # quadrants 2 and 3: negated
    fast = m.as_float(m.b.xor(m.as_int(value), sign))
    if quarter == 0:  # sin(-0) = -0 (the reduction's k * PIO2_MID is +0: r's sign was lost)
        fast = m.select(m.cmp("==", x, m.f(0.0)), x, fast)
    inside = m.cmp("<", m.call("llvm.fabs", x), m.f(FAST_LIMIT))  # (false for NaN)
    return m.unlikely_branch(m.every_lane(inside), fast, lambda: m.per_lane_libm(libm, x))


# the inverse and hyperbolic functions, composed from exp, log and atan's polynomial: float32
# within a few ulp (tests/codegen/test_llvm_trig.py), where libm per lane ran 4-5x slower than
# eager's vectorized ones
COMPOSED = ("atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh")
BINARY = ("atan2", "hypot")  # a point's angle and radius: two arguments


# -- inverse trigonometric -----------------------------------------------------------------------
TAN_PI_8, TAN_3PI_8 = 0.41421356237309503, 2.414213562373095
# atan z = z + z^3 P(z^2) on |z| <= tan(pi/8) (Cephes atanf's coefficients)
ATAN_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
HALF_PI, QUARTER_PI = 1.5707963267948966, 0.7853981633974483


def atan(m, x):
    return _with_sign_of(m, _atan_of_magnitude(m, m.call("llvm.fabs", x)), x)


def _atan_of_magnitude(m, a):
    """atan a for a >= 0 (inf: pi/2; NaN: NaN): a reduced by atan a = pi/2 + atan(-1/a) past
    tan(3pi/8), pi/4 + atan((a - 1) / (a + 1)) past tan(pi/8)."""
    big, mid = m.cmp(">", a, m.f(TAN_3PI_8)), m.cmp(">", a, m.f(TAN_PI_8))
    reduced = m.select(mid, m.b.fdiv(m.sub(a, m.f(1.0)), m.add(a, m.f(1.0))), a)
    z = m.select(big, m.b.fdiv(m.f(-1.0), a), reduced)
    base = m.select(big, m.f(HALF_PI), m.select(mid, m.f(QUARTER_PI), m.f(0.0)))
    z2 = m.mul(z, z)
    return m.add(base, m.fma(m.mul(z, z2), m.poly(z2, ATAN_POLY), z))


def asin(m, x):
    """atan(a / sqrt((1 - a)(1 + a))), the product exact where it matters (a >= 1/2)."""
    a = m.call("llvm.fabs", x)
    root = m.call("llvm.sqrt", m.mul(m.sub(m.f(1.0), a), m.add(m.f(1.0), a)))
    return _with_sign_of(m, _atan_of_magnitude(m, m.b.fdiv(a, root)), x)


def acos(m, x):
    """2 atan(sqrt((1 - x) / (1 + x))): no cancellation near 1 (acos small) or -1 (pi)."""
    ratio = m.b.fdiv(m.sub(m.f(1.0), x), m.add(m.f(1.0), x))
    return m.mul(m.f(2.0), _atan_of_magnitude(m, m.call("llvm.sqrt", ratio)))


# -- hyperbolic -----------------------------------------------------------------------------------
# sinh x = x + x^3 P(x^2) on |x| <= 1 (Cephes sinhf's coefficients)
SINH_POLY = (2.03721912945e-4, 8.33028376239e-3, 1.66667160211e-1)
LN2 = 0.6931471805599453
LOG_TAIL_FROM = 1.0e9  # past it, 1 + x^2 loses 1 entirely: asinh / acosh x = log x + ln 2


def sinh(m, x):
    """A polynomial on |x| <= 1; past it (h^2 - 1 / h^2) / 2 with h = e**(|x| / 2), whose
    halving is exact and whose square overflows only where sinh does."""
    a = m.call("llvm.fabs", x)
    a2 = m.mul(a, a)
    small = m.fma(m.mul(a, a2), m.poly(a2, SINH_POLY), a)
    h = m.exp(m.mul(a, m.f(0.5)))
    large = m.sub(m.mul(m.mul(h, m.f(0.5)), h), m.b.fdiv(m.f(0.5), m.mul(h, h)))
    return _with_sign_of(m, m.select(m.cmp("<=", a, m.f(1.0)), small, large), x)


def cosh(m, x):
    """(h^2 + 1 / h^2) / 2 with h = e**(|x| / 2)."""
    h = m.exp(m.mul(m.call("llvm.fabs", x), m.f(0.5)))
    return m.fma(m.mul(h, m.f(0.5)), h, m.b.fdiv(m.f(0.5), m.mul(h, h)))


def asinh(m, x):
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))) (= log(a + sqrt(a^2 + 1)) without its cancellation
    at small a), log a + ln 2 past LOG_TAIL_FROM."""
    a = m.call("llvm.fabs", x)
    a2 = m.mul(a, a)
    near = m.log1p(m.add(a, m.b.fdiv(a2, m.add(m.f(1.0), m.call("llvm.sqrt", m.add(m.f(1.0), a2))))))  # fmt: skip
    far = m.add(m.log(a), m.f(LN2))
    return _with_sign_of(m, m.select(m.cmp(">", a, m.f(LOG_TAIL_FROM)), far, near), x)


def acosh(m, x):
    """log1p(t + sqrt(t (t + 2))) with t = x - 1 (exact near 1), log x + ln 2 past
    LOG_TAIL_FROM; NaN below 1."""
    t = m.sub(x, m.f(1.0))
    near = m.log1p(m.add(t, m.call("llvm.sqrt", m.mul(t, m.add(t, m.f(2.0))))))
    far = m.add(m.log(x), m.f(LN2))
    result = m.select(m.cmp(">", x, m.f(LOG_TAIL_FROM)), far, near)
    return m.select(m.cmp("<", x, m.f(1.0)), m.f(float("nan")), result)  # (-3e38: t^2 is inf)


def atanh(m, x):
    """log1p(2a / (1 - a)) / 2, signed: 1 gives inf, past 1 NaN."""
    a = m.call("llvm.fabs", x)
    ratio = m.b.fdiv(m.mul(a, m.f(2.0)), m.sub(m.f(1.0), a))
    return _with_sign_of(m, m.mul(m.log1p(ratio), m.f(0.5)), x)


def _with_sign_of(m, magnitude, x):
    """magnitude (>= 0, or NaN) with x's sign bit: an odd function's value, -0 for -0."""
    sign = m.b.and_(m.as_int(x), m.i(-(1 << 31)))
    return m.as_float(m.b.or_(m.as_int(magnitude), sign))


# -- a point's angle and radius -------------------------------------------------------------------
PI = 3.141592653589793


def atan2(m, y, x):
    """The angle of (x, y): atan of the smaller over the larger magnitude (at most 1), then
    pi/2 - a where |y| is larger, pi - a where x is negative (or -0), y's sign; both zero give
    0 (or pi), both infinite pi/4 (or 3pi/4), as C's atan2."""
    ay, ax = m.call("llvm.fabs", y), m.call("llvm.fabs", x)
    steep = m.cmp(">", ay, ax)
    small, large = m.select(steep, ax, ay), m.select(steep, ay, ax)
    ratio = m.b.fdiv(small, large)
    ratio = m.select(m.cmp("==", large, m.f(0.0)), m.f(0.0), ratio)
    ratio = m.select(m.cmp("==", small, m.f(float("inf"))), m.f(1.0), ratio)
    angle = _atan_of_magnitude(m, ratio)
    angle = m.select(steep, m.sub(m.f(HALF_PI), angle), angle)
    negative_x = m.b.icmp_signed("<", m.as_int(x), m.i(0))  # (-0 too)
    angle = m.select(negative_x, m.sub(m.f(PI), angle), angle)
    angle = _with_sign_of(m, angle, y)
    return m.select(m.b.fcmp_unordered("uno", x, y), m.add(x, y), angle)


def hypot(m, x, y):
    """large * sqrt(1 + (small / large)^2): no overflow or underflow in the squares; 0 for
    two zeros, inf where either is infinite (a NaN beside it too, as C's hypot)."""
    ax, ay = m.call("llvm.fabs", x), m.call("llvm.fabs", y)
    wider = m.cmp(">", ay, ax)
    small, large = m.select(wider, ax, ay), m.select(wider, ay, ax)
    ratio = m.b.fdiv(small, large)
    result = m.mul(large, m.call("llvm.sqrt", m.fma(ratio, ratio, m.f(1.0))))
    result = m.select(m.cmp("==", large, m.f(0.0)), m.f(0.0), result)
    result = m.select(m.b.fcmp_unordered("uno", x, y), m.add(x, y), result)
    infinite = m.b.or_(m.cmp("==", ax, m.f(float("inf"))), m.cmp("==", ay, m.f(float("inf"))))
    return m.select(infinite, m.f(float("inf")), result)
