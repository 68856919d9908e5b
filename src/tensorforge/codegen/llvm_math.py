"""Math intrinsics as LLVM IR: float32 exp/log/log1p/expm1/log2/log10/tanh/sigmoid/erf/erfc (and
sin/cos and the rest of llvm_trig.py) as inlinable polynomials, written in llvm_math_builder's
MathBuilder.

A loop that calls `expf` per lane runs no faster than numpy (PERF-NOTES "exp is the trap"), so
float32 math is emitted as range reduction plus a polynomial in one `internal alwaysinline`
helper per function and vector width (`__tf_exp_v8f32`). After inlining it is plain vector
arithmetic; the scalar helper vectorizes inside LLVM's loop vectorizer too. float64 uses the
`llvm.*` intrinsics or libm per lane; float16 computes in float32.

Accuracy (float32, against a float64 reference, every 97th float32 bit pattern and a dense sweep:
benchmarks/math_accuracy.py): exp 1.2 ulp, log 0.9, log2 1.5, tanh 2.7 (1.7e-7 relative), erf 2.6
(1.8e-7 relative), sigmoid 2.6. erf and tanh are one branch-free odd rational each on a clamped
range. exp is branch-free where AVX-512's scalef applies 2**n; elsewhere it runs a short fast
path when every lane is in [-86.5, 88] or below -104 (0, as for -inf) and branches to an exact
path (denormals, overflow, NaN) otherwise. exp overflows to inf and underflows to 0 (through
denormals), log(0) = -inf, log(x < 0) = NaN, NaN propagates; tanh, sigmoid and erf saturate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from tensorforge.codegen import llvm_trig
from tensorforge.codegen.llvm_math_builder import MathBuilder, mangle

F32 = ir.FloatType()
I32 = ir.IntType(32)

# Functions this module implements as polynomials for float32 (and float16 via float32).
POLYNOMIAL_FUNCTIONS = ("exp", "log", "log2", "log10", "tanh", "sigmoid", "erf", "erfc")
POLYNOMIAL_FUNCTIONS += ("log1p", "expm1")
POLYNOMIAL_FUNCTIONS += ("exp2", "sin", "cos", "tan", *llvm_trig.COMPOSED, *llvm_trig.BINARY)


def math_function(
    module: ir.Module, name: str, ty: ir.Type, cpu_features: frozenset[str] = frozenset()
) -> ir.Function:
    """The helper computing float32 `name` on `ty` (float or <n x float>), one per module.

    `cpu_features` (LLVM's names, "avx512f") allow x86 reciprocal estimates in place of divides.
    """
    symbol = f"__tf_{name}_{mangle(ty)}"
    existing = module.globals.get(symbol)
    if existing is not None:
        return existing
    arity = 2 if name in llvm_trig.BINARY else 1
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * arity), name=symbol)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    m = _Math(module, builder, ty, cpu_features)
    builder.ret(_BODIES[name](m, *fn.args))
    return fn


class _Math(MathBuilder):
    """A MathBuilder whose exp, log, log1p and expm1 are this module's (inlined, not called)."""

    def exp(self, x):
        return _exp(self, x)

    def log(self, x):
        return _log(self, x)

    def log1p(self, x):
        return _log1p(self, x)

    def expm1(self, x):
        return _expm1(self, x)


_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 split so that n * _LN2_HI is exact
_ROUND_MAGIC = 12582912.0  # 1.5 * 2**23: adding it rounds to an integer held in the low bits
_EXP_POLY = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)  # Cephes expf on [-ln2/2, ln2/2]


def _exp(m: _Math, x):
    """exp. With AVX-512: one branch-free path, 2**n applied by scalef (which overflows to inf
    and rounds denormals itself): x clamped, lanes under the underflow edge set to 0. Elsewhere: the fast path below
    where every lane is in range or underflows to 0, else the exact one (a branch that typical
    data never takes: softmax, sigmoid and tanh arguments sit well inside the range). Lanes past
    the underflow edge (-inf: a causal mask's softmax, half its lanes) take 0 on the fast path:
    sent to the exact one, a masked softmax ran 5x slower."""
    # NOTE: measured in L2, 1 thread, 64-lane vectors: the scalef form 1.24x the fast path with
    # its range check on AVX-512; without scalef a branch-free form (2**n in two halves, as the
    # exact path) ran 0.88-0.91x the branching one, so the branch stays there
    if m.has_scalef():
        # NOTE: lanes below the underflow edge compute e**0 and take 0 by a select: clamped to
        # the edge instead, scalef's underflow to 0 takes a microcode assist per vector (a
        # causal mask's -inf, half the lanes: softmax 12 x 128 x 128, 1 thread, 518 -> 122 us)
        zero = m.cmp("<", x, m.f(_EXP_ZERO_BELOW))
        x = m.select(m.cmp(">", x, m.f(89.0)), m.f(89.0), x)  # NaN passes the selects
        x = m.select(zero, m.f(0.0), x)
        _, n, p = _exp_reduce(m, x)
        return m.select(zero, m.f(0.0), m.scale_by_pow2(p, n))
    underflow = m.cmp("<", x, m.f(_EXP_ZERO_BELOW))
    fast = m.select(underflow, m.f(0.0), _exp_in_range(m, x))
    low_ok = m.b.or_(m.cmp(">=", x, m.f(_EXP_FAST_LO)), underflow)
    in_range = m.b.and_(low_ok, m.cmp("<=", x, m.f(_EXP_FAST_HI)))
    return m.unlikely_branch(m.every_lane(in_range), fast, lambda: _exp_exact(m, x), "exp")


# The fast path's domain: n = round(x log2 e) in [-125, 127], so 2**n * p(r) stays a normal
# float and its exponent can be added as an integer. Outside (and for NaN) the exact path runs.
_EXP_FAST_LO, _EXP_FAST_HI = -86.5, 88.0
# below this e**x is under half the smallest denormal (2**-150 = e**-103.97): it rounds to 0
_EXP_ZERO_BELOW = -104.0
# e**r = 1 + r + r^2 (c2 + c3 r + ... + c7 r^5) on [-ln2/2, ln2/2]: Cephes expf's coefficients
_EXP_TAYLORISH = (1.0, 1.0) + tuple(reversed(_EXP_POLY))


def _exp_in_range(m: _Math, x):
    shifted, _, p = _exp_reduce(m, x)
    # shifted's bits are magic + n; shifting left by 23 keeps n's low 9 bits in the exponent field
    scale = m.b.shl(m.as_int(shifted), m.i(23))
    return m.as_float(m.b.add(m.as_int(p), scale))


def _exp_reduce(m: _Math, x):
    """x = n ln 2 + r: (magic + n as a float, n, e**r)."""
    # NOTE: a short dependency chain matters as much as the operation count: a vectorized loop
    # of exps is limited by how many of them the out-of-order window overlaps. Estrin's scheme
    # (depth 3) instead of Horner's (depth 7).
    shifted = m.fma(x, m.f(_LOG2E), m.f(_ROUND_MAGIC))  # low bits hold round(x log2 e)
    n = m.sub(shifted, m.f(_ROUND_MAGIC))
    r = m.fma(n, m.f(-_LN2_HI), x)
    r = m.fma(n, m.f(-_LN2_LO), r)
    c = _EXP_TAYLORISH
    r2 = m.mul(r, r)
    r4 = m.mul(r2, r2)
    low = m.fma(m.fma(m.f(c[3]), r, m.f(c[2])), r2, r)
    high = m.fma(m.fma(m.f(c[7]), r, m.f(c[6])), r2, m.fma(m.f(c[5]), r, m.f(c[4])))
    p = m.add(m.fma(high, r4, low), m.f(1.0))  # the 1 added last: one rounding of the sum
    return shifted, n, p


def _exp_exact(m: _Math, x):
    # NOTE: clamping keeps n in [-150, 128]; NaN passes the selects (comparisons are false) and
    # stays NaN through the arithmetic, so no special case is needed for it.
    x = m.select(m.cmp(">", x, m.f(89.0)), m.f(89.0), x)
    x = m.select(m.cmp("<", x, m.f(-104.0)), m.f(-104.0), x)
    shifted = m.fma(x, m.f(_LOG2E), m.f(_ROUND_MAGIC))  # round(x * log2 e) + magic
    n = m.sub(shifted, m.f(_ROUND_MAGIC))
    ni = m.b.sub(m.as_int(shifted), m.as_int(m.f(_ROUND_MAGIC)))
    r = m.fma(n, m.f(-_LN2_HI), x)
    r = m.fma(n, m.f(-_LN2_LO), r)
    y = m.fma(m.poly(r, _EXP_POLY), m.mul(r, r), r)
    y = m.add(y, m.f(1.0))
    # 2**n in two halves so results in the denormal range and 2**128 (-> inf) come out right
    half = m.b.ashr(ni, m.i(1))
    return m.mul(m.mul(y, m.pow2(half)), m.pow2(m.b.sub(ni, half)))


def _exp2(m: _Math, x):
    """2**x = 2**n e**(f ln 2), n = round(x), f = x - n exact in [-1/2, 1/2] (e**(x ln 2)
    would carry the product's rounding, x ulps of it); 2**n in two halves as the exact exp's,
    so that denormal results and overflow to inf come out right."""
    clamped = m.select(m.cmp(">", x, m.f(130.0)), m.f(130.0), x)
    clamped = m.select(m.cmp("<", clamped, m.f(-160.0)), m.f(-160.0), clamped)
    shifted = m.add(clamped, m.f(_ROUND_MAGIC))  # low bits: round(x)
    n = m.sub(shifted, m.f(_ROUND_MAGIC))
    ni = m.b.sub(m.as_int(shifted), m.as_int(m.f(_ROUND_MAGIC)))
    p = _exp(m, m.mul(m.sub(clamped, n), m.f(math.log(2.0))))
    half = m.b.ashr(ni, m.i(1))
    result = m.mul(m.mul(p, m.pow2(half)), m.pow2(m.b.sub(ni, half)))
    return m.select(m.b.fcmp_unordered("!=", x, x), x, result)  # (NaN: its bits are garbage)


# -- log, log2 ------------------------------------------------------------------------------------
_LOG_POLY = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)  # Cephes logf: log(1+x) = x - x^2/2 + x^3 P(x) on [sqrt(.5)-1, sqrt(2)-1]


def _log_reduce(m: _Math, x):
    """x = 2**e * (1 + f) with 1 + f in [sqrt(.5), sqrt(2)): returns (e as float, f, tail).

    log(1 + f) = f + tail, where tail = f^3 P(f) - f^2 / 2.
    """
    denormal = m.cmp("<", x, m.f(1.17549435e-38))
    x = m.select(denormal, m.mul(x, m.f(8388608.0)), x)  # scale denormals by 2**23
    bits = m.as_int(x)
    e = m.b.sub(m.b.lshr(bits, m.i(23)), m.i(126))
    e = m.b.sub(e, m.select(denormal, m.i(23), m.i(0)))
    mant = m.as_float(m.b.or_(m.b.and_(bits, m.i(0x007FFFFF)), m.i(0x3F000000)))  # [0.5, 1)
    small = m.cmp("<", mant, m.f(0.707106781186547524))
    e = m.b.sub(e, m.select(small, m.i(1), m.i(0)))
    f = m.sub(m.select(small, m.add(mant, mant), mant), m.f(1.0))
    z = m.mul(f, f)
    tail = m.mul(m.mul(m.poly(f, _LOG_POLY), f), z)
    tail = m.fma(z, m.f(-0.5), tail)
    return m.b.sitofp(e, m.ty), f, tail


def _log_special(m: _Math, x, result):
    """log(+inf) = inf, log(0) = -inf, log(x < 0) = log(NaN) = NaN."""
    result = m.select(m.cmp("==", x, m.f(math.inf)), m.f(math.inf), result)
    result = m.select(m.cmp("==", x, m.f(0.0)), m.f(-math.inf), result)
    return m.select(m.b.fcmp_unordered("<", x, m.f(0.0)), m.f(math.nan), result)


def _log(m: _Math, x):
    e, f, tail = _log_reduce(m, x)
    result = m.fma(e, m.f(_LN2_LO), tail)
    result = m.add(f, result)
    return _log_special(m, x, m.fma(e, m.f(_LN2_HI), result))


def _log1p(m: _Math, x):
    """log(1 + x) as log(u) * x / (u - 1), u = 1 + x rounded (Goldberg's form: the ratio
    cancels u's rounding error); x itself where u rounds to 1, inf for inf."""
    u = m.add(m.f(1.0), x)
    result = m.mul(_log(m, u), m.b.fdiv(x, m.sub(u, m.f(1.0))))
    result = m.select(m.cmp("==", u, m.f(1.0)), x, result)
    return m.select(m.cmp("==", u, m.f(math.inf)), u, result)


def _expm1(m: _Math, x):
    """e**x - 1 as (u - 1) * x / log(u), u = e**x rounded (Kahan's form: the ratio cancels
    u's rounding error); x where u rounds to 1, -1 where u - 1 does, inf where u overflows."""
    u = _exp(m, x)
    u_minus_1 = m.sub(u, m.f(1.0))
    result = m.mul(u_minus_1, m.b.fdiv(x, _log(m, u)))
    result = m.select(m.cmp("==", u, m.f(1.0)), x, result)
    result = m.select(m.cmp("==", u_minus_1, m.f(-1.0)), m.f(-1.0), result)
    return m.select(m.cmp("==", u, m.f(math.inf)), u, result)


def _log2(m: _Math, x):
    e, f, tail = _log_reduce(m, x)
    log2e_minus_1 = m.f(0.44269504088896340736)  # f * log2(e) split as f * (log2(e) - 1) + f
    result = m.fma(tail, log2e_minus_1, m.mul(f, log2e_minus_1))
    result = m.add(m.add(m.add(result, tail), f), e)
    return _log_special(m, x, result)


def _log10(m: _Math, x):
    """log10 = e log10(2) + log(1 + f) log10(e), each constant split in a short head (exact
    products with e) and its tail, summed from the smallest term up."""
    e, f, tail = _log_reduce(m, x)
    result = m.fma(m.add(f, tail), m.f(_LOG10E_LO), m.mul(tail, m.f(_LOG10E_HI)))
    result = m.fma(f, m.f(_LOG10E_HI), result)
    result = m.fma(e, m.f(_LOG10_2_LO), result)
    return _log_special(m, x, m.fma(e, m.f(_LOG10_2_HI), result))


_LOG10_2_HI, _LOG10_2_LO = 0.30078125, 2.48745663981195213739e-4  # log10(2) = HI + LO
_LOG10E_HI, _LOG10E_LO = 0.43359375, 7.00731903251827651129e-4  # log10(e) = HI + LO


# -- tanh, sigmoid --------------------------------------------------------------------------------
# tanh(x) = x / 8 + x N(x^2) / Q(x^2) on |x| <= 9.02, as erf below: tanh(x) / x = P / Q a (6, 6)
# rational fitted here (4.7e-9 in exact arithmetic with these float32 coefficients), N = P - Q / 8
# (the rounding errors of N / Q scaled by at most 0.88, by 0.1 near the clamp: 1.8e-7 relative in
# all, against 2.5e-6 computed as x P / Q whole). Q stays above 1 on the range.
_TANH_CLAMP = 9.02  # tanh(x) rounds to 1 in float32 from |x| = 9.01 on
_TANH_Q = (
    -2.9013756674967084e-11,
    -2.151548450513019e-08,
    -1.9598433027567808e-06,
    2.3918063379824162e-04,
    2.498018741607666e-02,
    4.6543610095977783e-01,
    1.0,
)


def _less_part(numerator: tuple, denominator: tuple, part: float) -> tuple:
    """N = P - Q * part, coefficient by coefficient (highest degree first): x P / Q computed as
    x * part + x N / Q (see erf below)."""
    return tuple(p - q * part for p, q in zip(numerator, denominator, strict=True))


_TANH_N = _less_part(
    (
        -3.7099725960602903e-13,
        -1.0300622577119611e-09,
        -2.7924701839765476e-07,
        2.3417621832777513e-06,
        3.168160328641534e-03,
        1.3210275769233704e-01,
        1.0,
    ),
    _TANH_Q,
    1 / 8,
)


def _odd_rational(m: _Math, x, clamp: float, numerator, denominator, part: float):
    """x * part + x * N(x^2) / Q(x^2) for x clamped to [-clamp, clamp]: one branch-free path.
    The clamps keep NaN (a comparison with NaN is false: the select passes x through) and take
    +-inf to +-clamp; -0 stays -0. From the clamp on, the result is +-1 exactly (the function
    rounds to 1 there; the rational gave 1 - 2**-24, and GELU of -8.6e9 -256 where eager has 0)."""
    large = m.cmp(">=", m.call("llvm.fabs", x), m.f(clamp))
    x = m.select(m.cmp(">", x, m.f(clamp)), m.f(clamp), x)
    x = m.select(m.cmp("<", x, m.f(-clamp)), m.f(-clamp), x)
    t = m.mul(x, x)
    ratio = m.divide(m.poly(t, numerator), m.poly(t, denominator))
    result = m.fma(x, ratio, m.mul(x, m.f(part)))
    return m.select(large, m.call("llvm.copysign", m.f(1.0), x), result)


def _tanh(m: _Math, x):
    # NOTE: ~21 vector operations; the form before it (a polynomial below |x| = 0.625, else
    # 1 - 2 / (exp(2|x|) + 1), both computed, exp with its range check and branch) took ~40
    return _odd_rational(m, x, _TANH_CLAMP, _TANH_N, _TANH_Q, 0.125)


def _sigmoid(m: _Math, x):
    # e = exp(-|x|) never overflows: 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, which
    # keeps the tiny results of large negative x (down to denormals) and saturates at 0 and 1
    e = _exp(m, m.b.fneg(m.call("llvm.fabs", x)))
    r = m.reciprocal(m.add(m.f(1.0), e))
    return m.select(m.cmp("<", x, m.f(0.0)), m.mul(e, r), r)


# -- erf ------------------------------------------------------------------------------------------
# erf(x) = x / 4 + x N(x^2) / Q(x^2) on |x| <= 3.925: erf(x) / x = P / Q is a (5, 5) rational
# fitted here for minimal relative error (Lawson-weighted least squares against mpmath, the
# coefficients then rounded to float32 one at a time, refitting the rest: 2.6e-8 in exact
# arithmetic), and N = P - Q / 4. Taking x / 4 out (exactly) scales the rounding errors of
# N / Q by |N / Q| / (P / Q): at most 0.78, and 0.02 near |x| = 3.9 where erf is within 1e-7
# of 1. Computed whole, P / Q was off by up to 3.2e-7 (erf = x / 2 + ...: 2.5e-7); now 1.8e-7.
# (A (5, 6) rational, 7.5e-9 exact, was as accurate in float32 and 1.07x slower in GELU.)
_ERF_CLAMP = 3.925  # erf(x) rounds to 1 in float32 from |x| = 3.919 on
_ERF_Q = (
    3.805708183790557e-05,
    1.1582056758925319e-03,
    1.493773702532053e-02,
    1.1396415531635284e-01,
    5.017749667167664e-01,
    1.0000041723251343,
)
_ERF_N = _less_part(
    (
        2.0497477635217365e-06,
        2.8428997029550374e-04,
        3.7496290169656277e-03,
        5.269956216216087e-02,
        1.9006489217281342e-01,
        1.1283838748931885,
    ),
    _ERF_Q,
    1 / 4,
)


def _erf(m: _Math, x):
    # NOTE: 20 vector operations (AVX-512). The two-piece form before it (a polynomial below |x| = 0.92
    # and 1 - exp(poly) above, both computed and one selected) took ~35, and GELU's separate
    # pass was compute-bound on it.
    return _odd_rational(m, x, _ERF_CLAMP, _ERF_N, _ERF_Q, 0.25)


def _erfc(m: _Math, x):
    """erfc |x| = t e**(-x^2 + P(s)), t = 1 / (1 + |x| / 2) and s = t mapped onto [-1, 1] for
    |x| <= 10.1 (erfc is 0 past it: under half the smallest denormal); P a degree-10 fit of
    log(erfc a) + a^2 - log t there (2e-9 from it; float32 Horner adds 1e-7). x^2 = hi + lo
    exactly (an FMA), so e**-hi carries exp's error alone and e**(P - lo) is near 1.
    erfc(-x) = 2 - erfc(x). Where 1 - erf(x) loses every bit past x = 4, this stays relative
    (within 6 ulp, tests/codegen/test_llvm_trig.py)."""
    a = m.call("llvm.fabs", x)
    t = m.b.fdiv(m.f(1.0), m.fma(a, m.f(0.5), m.f(1.0)))
    s = m.mul(m.sub(t, m.f(_ERFC_T_MID)), m.f(1.0 / _ERFC_T_HALF))
    hi = m.mul(a, a)
    lo = m.fma(a, a, m.b.fneg(hi))
    tail = m.sub(m.poly(s, _ERFC_FIT), lo)
    value = m.mul(m.mul(t, _exp(m, m.b.fneg(hi))), _exp(m, tail))
    value = m.select(m.cmp(">", a, m.f(10.1)), m.f(0.0), value)
    return m.select(m.cmp("<", x, m.f(0.0)), m.sub(m.f(2.0), value), value)


_ERFC_T_MID, _ERFC_T_HALF = 0.5826446280991735, 0.41735537190082644  # t in [1 / 6.05, 1]
_ERFC_FIT = (
    -2.3097409211914055e-05,
    5.599463474936783e-05,
    0.0001304540055571124,
    -0.0005421246751211584,
    -0.0002722139179240912,
    0.0037408550269901752,
    -0.00108341162558645,
    -0.029609641060233116,
    0.015943774953484535,
    0.5711973905563354,
    -0.559537947177887,
)  # least squares on 4000 Chebyshev nodes of s in float64 (numpy's chebfit, as powers),
# highest power first


_BODIES: dict[str, Callable[[_Math, ir.Value], ir.Value]] = {
    "sin": llvm_trig.sin,
    "cos": llvm_trig.cos,
    "tan": llvm_trig.tan,
    **{name: getattr(llvm_trig, name) for name in (*llvm_trig.COMPOSED, *llvm_trig.BINARY)},
    "exp2": _exp2,
    "exp": _exp,
    "log": _log,
    "log1p": _log1p,
    "expm1": _expm1,
    "log2": _log2,
    "log10": _log10,
    "tanh": _tanh,
    "sigmoid": _sigmoid,
    "erf": _erf,
    "erfc": _erfc,
}
