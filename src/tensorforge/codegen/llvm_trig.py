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
