"""float32/float64/float16 math intrinsics of the llvm backend against numpy, in ulps: the
polynomials of codegen/llvm_math.py, their special values, and their fast and exact paths."""

import math

import numpy as np
import pytest

from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import PrimFunc, Seq
from tensorforge.te.expr import Call, FloorDiv, Var
from tests.codegen.llvm_builders import (
    aligned,
    c,
    compile_func,
    load,
    loop,
    ramp,
    run,
    store,
    unary_kernel,
)


def ulp_error(got, x64, reference):
    """Max distance in float32 ulps between got and the float64 reference."""
    with np.errstate(over="ignore", invalid="ignore"):  # exp overflows to inf on purpose
        want64 = reference(x64.astype(np.float64))
        want = want64.astype(np.float32)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        spacing = np.maximum(
            np.spacing(np.abs(want)).astype(np.float64), float(np.spacing(np.float32(0)))
        )
        err = np.where(same, 0.0, np.abs(got.astype(np.float64) - want64) / spacing)
    return float(np.max(err))


def _erf64(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


MATH = {  # name: (numpy reference on float64, input sampler, max float32 ulps allowed)
    "exp": (np.exp, lambda r, n: r.uniform(-105, 90, n), 2),
    "log": (np.log, lambda r, n: np.exp(r.uniform(-100, 88, n)), 2),
    "log2": (np.log2, lambda r, n: np.exp(r.uniform(-100, 88, n)), 2),
    "log10": (np.log10, lambda r, n: np.exp(r.uniform(-100, 88, n)), 2),
    "tanh": (np.tanh, lambda r, n: r.uniform(-10, 10, n), 3),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda r, n: r.uniform(-100, 100, n), 4),
    "erf": (_erf64, lambda r, n: r.uniform(-5, 5, n), 3),
    "sqrt": (np.sqrt, lambda r, n: r.uniform(0, 1e4, n), 0.5),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda r, n: r.uniform(1e-3, 1e4, n), 1.5),
    "floor": (np.floor, lambda r, n: r.uniform(-100, 100, n), 0),
    "ceil": (np.ceil, lambda r, n: r.uniform(-100, 100, n), 0),
    "round": (
        np.round,
        lambda r, n: np.round(r.uniform(-100, 100, n) * 2) / 2,
        0,
    ),  # halves to even
    "abs": (np.abs, lambda r, n: r.uniform(-100, 100, n), 0),
    # log(u) x / (u - 1) and (u - 1) x / log(u) on the polynomials: their errors and a divide
    "log1p": (np.log1p, lambda r, n: np.exp(r.uniform(-30, 80, n)) * r.choice([-1, 1], n), 3),
    "expm1": (np.expm1, lambda r, n: r.uniform(-20, 88, n), 3),
}


@pytest.mark.parametrize(
    "name,lanes",
    [(name, lanes) for name in sorted(MATH) for lanes in (1, 8, 16)]
    + [("sigmoid", 64), ("tanh", 64), ("sigmoid", 4), ("tanh", 4)],  # reciprocal estimate pieces
)
def test_math_float32_against_numpy(name, lanes, rng):
    reference, sample, max_ulp = MATH[name]
    size = 4096
    x = sample(rng, size).astype(np.float32)
    if name in (
        "exp",
        "tanh",
        "sigmoid",
        "erf",
        "log1p",
        "expm1",
    ):  # also small arguments, where relative error shows
        x[: size // 4] = (rng.standard_normal(size // 4) * 0.3).astype(np.float32)
    a, b = aligned(x), aligned(np.zeros(size, np.float32))
    dtype = "float32" if lanes == 1 else f"float32x{lanes}"
    func = unary_kernel(f"k_{name}", lambda v: Call(dtype, name, (v,)), lanes)
    exe = run(func, a, b, size)
    assert ulp_error(b, x, reference) <= max_ulp
    if lanes > 1 and name in ("exp", "log", "tanh", "sigmoid", "erf"):
        asm = exe.get_source("asm")
        # a vector polynomial, not a libm call per lane
        assert "expf" not in asm and "logf" not in asm and "tanhf" not in asm and "erff" not in asm


@pytest.mark.parametrize("lanes", [16, 8])
def test_erf_relative_error_on_a_dense_sweep(lanes):
    # erf is one rational x / 4 + x N(x^2) / Q(x^2) on |x| <= 3.925 (no branch, no second path):
    # within 2e-7 relative everywhere, tails and denormals included (every 4093rd bit pattern)
    x = np.concatenate(
        [
            np.linspace(-4.5, 4.5, 2**18).astype(np.float32),
            np.arange(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    x = x[: x.size - x.size % lanes]
    a, b = aligned(x), aligned(np.zeros(x.size, np.float32))
    dtype = f"float32x{lanes}"
    run(unary_kernel(f"e_{lanes}", lambda v: Call(dtype, "erf", (v,)), lanes), a, b, x.size)
    with np.errstate(invalid="ignore"):  # NaN inputs
        want = _erf64(x.astype(np.float64))
    normal = np.isfinite(x) & (np.abs(want) >= np.finfo(np.float32).tiny)
    rel = np.abs(b[normal] - want[normal]) / np.abs(want[normal])
    assert rel.max() <= 2e-7
    np.testing.assert_array_equal(np.isnan(b), np.isnan(x))
    np.testing.assert_array_equal(b[np.isinf(x)], np.sign(x[np.isinf(x)]))
    tiny = ~normal & np.isfinite(x)  # denormal results: x / 4 rounds there
    assert ulp_error(b[tiny], x[tiny], _erf64) <= 1.5


SPECIAL = np.array(
    [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        1e-40,
        -1e-40,
        88.72,
        88.73,
        -87.5,
        -103.5,
        -200.0,
        200.0,
        1e30,
        -1e30,
        0.5,
    ],
    np.float32,
)


@pytest.mark.parametrize("name", ["exp", "log", "log2", "tanh", "sigmoid", "erf"])
def test_math_special_values(name):
    reference = MATH[name][0]
    a, b = aligned(SPECIAL), aligned(np.zeros(SPECIAL.size, np.float32))
    run(unary_kernel(f"s_{name}", lambda v: Call("float32", name, (v,)), 1), a, b, SPECIAL.size)
    with np.errstate(all="ignore"):
        want = reference(SPECIAL.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(b), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(b) & (b > 0), np.isinf(want) & (want > 0))
    finite = np.isfinite(want)
    np.testing.assert_allclose(b[finite], want[finite], rtol=1e-6, atol=1e-45)


@pytest.mark.parametrize("name,edge", [("tanh", 9.02), ("erf", 3.925)])
@pytest.mark.parametrize("lanes", [1, 8])
def test_tanh_and_erf_are_one_exactly_where_they_round_to_it(name, edge, lanes):
    # the rational at its clamp gave 1 - 2**-24: GELU (tanh form) of -8.6e9 was -256, not 0
    x = np.array([edge, 20.0, 1e3, 8.6e9, np.inf, -edge, -20.0, -8.6e9], np.float32)
    a, b = aligned(x), aligned(np.zeros(x.size, np.float32))
    dtype = "float32" if lanes == 1 else f"float32x{lanes}"
    run(unary_kernel(f"one_{name}", lambda v: Call(dtype, name, (v,)), lanes), a, b, x.size)
    np.testing.assert_array_equal(b, np.sign(x))


@pytest.mark.parametrize("name", ["exp", "log", "log2", "tanh", "sigmoid", "erf", "sqrt", "round"])
@pytest.mark.parametrize("lanes", [1, 4])
def test_math_float64(name, lanes, rng):
    reference, sample, _ = MATH[name]
    x = sample(rng, 256)
    a, b = aligned(x), aligned(np.zeros(256))
    dtype = "float64" if lanes == 1 else f"float64x{lanes}"
    run(unary_kernel(f"d_{name}", lambda v: Call(dtype, name, (v,)), lanes, "float64"), a, b, 256)
    np.testing.assert_allclose(b, reference(x), rtol=1e-14, atol=1e-300)


def test_pow_and_integer_abs(rng):
    n, i = Var("n"), Var("i")
    A, B, C = (Buffer(name, (n,), "float32") for name in "ABC")
    I, J = Buffer("I", (n,), "int32"), Buffer("J", (n,), "int32")
    idx = ramp(i * c(8), 8)
    body = loop(
        i,
        FloorDiv(n, c(8)),
        Seq(
            (
                store(C, idx, Call("float32x8", "pow", (load(A, idx), load(B, idx)))),
                store(J, idx, Call("int32x8", "abs", (load(I, idx),))),
            )
        ),
    )
    a, b = (
        aligned(rng.uniform(0.1, 10, 64).astype(np.float32)),
        aligned(rng.uniform(-3, 3, 64).astype(np.float32)),
    )
    ints = aligned(rng.integers(-1000, 1000, 64).astype(np.int32))
    out, jout = aligned(np.zeros(64, np.float32)), aligned(np.zeros(64, np.int32))
    run(PrimFunc("powabs", (A, B, C, I, J, n), body), a, b, out, ints, jout, 64)
    np.testing.assert_allclose(out, np.power(a, b), rtol=1e-6)
    np.testing.assert_array_equal(jout, np.abs(ints))


def test_float16_math_goes_through_float32(rng):
    x = aligned(rng.uniform(-4, 4, 64).astype(np.float16))
    y = aligned(np.zeros(64, np.float16))
    run(unary_kernel("h_exp", lambda v: Call("float16x8", "exp", (v,)), 8, "float16"), x, y, 64)
    np.testing.assert_allclose(y.astype(np.float32), np.exp(x.astype(np.float32)), rtol=2e-3)


def test_scalar_exp_loop_stays_scalar_without_a_libm_call():
    # LLVM's loop vectorizer is off (the schedule vectorizes): a scalar loop stays scalar, and
    # its exp is still the inlined polynomial, not a call to libm's expf
    exe = compile_func(unary_kernel("sexp", lambda v: Call("float32", "exp", (v,)), 1))[1]
    text = exe.get_source("ll")
    assert "<8 x float>" not in text and "expf" not in text


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "erf"])
def test_math_vector_mixes_fast_and_edge_lanes(name, lanes):
    # without AVX-512 (and in 8 lanes) exp takes a fast path when all lanes of a vector are in
    # range and an exact one otherwise: one special lane (NaN, inf, an underflow to a denormal)
    # must not spoil its neighbours, and lanes that underflow to 0 (a causal mask's -inf) stay
    # on the fast path; with AVX-512 in 16 lanes, one branch-free path must get them all right
    reference = MATH[name][0]
    x = np.array(
        [0.5, np.nan, -1.0, 2.0, 3.0, -0.25, 1.5, 0.1]  # NaN among ordinary lanes
        + [0.5, -90.0, -1.0, 2.0, 3.0, -0.25, 1.5, 0.1]  # a denormal result
        + [0.5, 89.0, -1.0, 2.0, np.inf, -0.25, -np.inf, 0.1]  # overflow and infinities
        + [0.5, -86.0, 87.5, 2.0, 3.0, -0.25, 1.5, 0.1]  # the fast path's own edges
        + [0.5, -np.inf, -1.0, -104.5, -1e30, -0.25, 1.5, -200.0]  # underflow to 0, fast path
        + [-np.inf, -103.9, -104.0, -104.01, -np.inf, -np.inf, -np.inf, -np.inf],  # its edge
        np.float32,
    )
    a, b = aligned(x), aligned(np.zeros(x.size, np.float32))
    dtype = f"float32x{lanes}"
    run(unary_kernel(f"m_{name}", lambda v: Call(dtype, name, (v,)), lanes), a, b, x.size)
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(b), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(b[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(b[finite], want[finite], rtol=3e-7, atol=1e-45)


def test_erf_tails_are_exact_and_branch_free():
    # erf rounds to +-1 in float32 from |x| = 3.92 on; the tails (GEMM outputs through GELU
    # reach |x| ~ 30) are the rational at the clamp: exactly +-1, and no branch
    x = np.concatenate([np.linspace(3.0, 40.0, 58), [np.inf, -np.inf, np.nan, -5.0, -3.9, 1e30]])
    x = x.astype(np.float32)
    a, b = aligned(x), aligned(np.zeros(x.size, np.float32))
    kernel = unary_kernel("t_erf", lambda v: Call("float32x8", "erf", (v,)), 8)
    run(kernel, a, b, x.size)
    with np.errstate(invalid="ignore"):  # NaN
        want = _erf64(x.astype(np.float64)).astype(np.float32)
    saturated = ~(np.abs(x) < 3.925)  # NaN too
    np.testing.assert_array_equal(b[saturated], want[saturated])
    assert ulp_error(b[~saturated], x[~saturated], _erf64) <= 1
    text = compile_func(kernel)[1].get_source("ll")
    plain = unary_kernel("t_abs", lambda v: Call("float32x8", "abs", (v,)), 8)
    assert "exp.slow" not in text
    assert text.count("br ") <= compile_func(plain)[1].get_source("ll").count("br ")
