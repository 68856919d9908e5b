"""float32 sin and cos of the llvm backend (codegen/llvm_trig.py) against numpy's float64, in
ulps: the polynomial path over |x| < 1e5 (small arguments, quadrant edges, both signs), and
the per-lane libm path its lanes past that, inf and NaN take."""

import numpy as np
import pytest

from tensorforge.te.expr import Call
from tests.codegen.llvm_builders import aligned, run, unary_kernel
from tests.codegen.test_llvm_math import ulp_error

REFERENCE = {"sin": np.sin, "cos": np.cos, "tan": np.tan}


def computed(name: str, x: np.ndarray, lanes: int) -> np.ndarray:
    a, b = aligned(x), aligned(np.zeros(x.size, np.float32))
    dtype = "float32" if lanes == 1 else f"float32x{lanes}"
    run(unary_kernel(f"t_{name}_{lanes}", lambda v: Call(dtype, name, (v,)), lanes), a, b, x.size)
    return b


def absolute_ulps(got: np.ndarray, x: np.ndarray, reference) -> float:
    """Error in ulps of 1 (the functions' magnitude): near a zero of sin, the relative error of
    a float32 argument's reduction is not the measure (numpy's float32 sin shows the same)."""
    want = reference(x.astype(np.float64))
    return float(np.max(np.abs(got.astype(np.float64) - want)) / np.spacing(np.float32(1)))


@pytest.mark.parametrize("name", ["sin", "cos"])
@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_sin_cos_within_2_ulp(name, lanes, rng):
    size = 8192
    x = np.concatenate(
        [
            rng.uniform(-4, 4, size // 4),
            rng.uniform(-1e5, 1e5, size // 4),
            rng.standard_normal(size // 4) * 1e-3,  # relative error shows here
            (rng.integers(-5000, 5000, size // 4) * (np.pi / 2)),  # quadrant edges
        ]
    ).astype(np.float32)
    got = computed(name, x, lanes)
    assert ulp_error(got, x, REFERENCE[name]) <= 2 or absolute_ulps(got, x, REFERENCE[name]) <= 1
    small = np.abs(x) < 0.5  # where the result is not near a zero of its own: relative
    assert ulp_error(got[small], x[small], REFERENCE[name]) <= 2
    assert absolute_ulps(got, x, REFERENCE[name]) <= 1.5


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
@pytest.mark.parametrize("lanes", [1, 16])
def test_special_values_and_huge_arguments_take_libm(name, lanes):
    special = [0.0, -0.0, 1e-30, -1e-38, 1e-45, 99999.0, 1e5, -1e5, 3e7, -1e20, 3.4e38]
    special += [np.inf, -np.inf, np.nan, 1.0, -2.0]
    x = np.array(special * 2, np.float32)[: 2 * lanes if lanes > 1 else len(special)]
    x = np.resize(x, (x.size // max(lanes, 1)) * max(lanes, 1))
    got = computed(name, x, lanes)
    with np.errstate(invalid="ignore"):
        want = REFERENCE[name](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    if name == "tan":  # (unbounded: relative)
        assert ulp_error(got[finite], x[finite], np.tan) <= 3
    else:
        assert absolute_ulps(got[finite], x[finite], REFERENCE[name]) <= 1
    if name != "cos":  # the sign of zero
        zeros = x == 0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(x[zeros]))


@pytest.mark.parametrize("lanes", [1, 16])
def test_tan_within_3_ulp(lanes, rng):
    size = 8192
    x = np.concatenate(
        [
            rng.uniform(-4, 4, size // 4),
            rng.uniform(-1e5, 1e5, size // 4),
            rng.standard_normal(size // 4) * 1e-3,
            (rng.integers(-5000, 5000, size // 4) * (np.pi / 2)),  # near its poles and zeros
        ]
    ).astype(np.float32)
    got = computed("tan", x, lanes)
    assert ulp_error(got, x, np.tan) <= 3


COMPOSED = {  # name: (numpy reference, sampler, max float32 ulps)
    "atan": (np.arctan, lambda r, n: r.standard_normal(n) * 10.0 ** r.uniform(-6, 6, n), 3),
    "asin": (np.arcsin, lambda r, n: r.uniform(-1, 1, n) ** 3, 4),
    "acos": (np.arccos, lambda r, n: r.uniform(-1, 1, n) ** 3, 4),
    "sinh": (np.sinh, lambda r, n: r.uniform(-89, 89, n) * r.uniform(0, 1, n) ** 4, 4),
    "cosh": (np.cosh, lambda r, n: r.uniform(-89, 89, n) * r.uniform(0, 1, n) ** 2, 4),
    "asinh": (np.arcsinh, lambda r, n: r.standard_normal(n) * 10.0 ** r.uniform(-6, 20, n), 3),
    "acosh": (np.arccosh, lambda r, n: 1 + 10.0 ** r.uniform(-7, 20, n), 3),
    "atanh": (np.arctanh, lambda r, n: r.uniform(-1, 1, n) ** 3, 3),
}


@pytest.mark.parametrize("name", sorted(COMPOSED))
@pytest.mark.parametrize("lanes", [1, 16])
def test_inverse_and_hyperbolic_within_a_few_ulp(name, lanes, rng):
    reference, sample, max_ulp = COMPOSED[name]
    x = sample(rng, 8192).astype(np.float32)
    x[:64] = np.linspace(-0.99, 0.99, 64) * (1 if name != "acosh" else -1) + (2 if name == "acosh" else 0)  # fmt: skip
    assert ulp_error(computed(name, x, lanes), x, reference) <= max_ulp


@pytest.mark.parametrize("name", sorted(COMPOSED))
def test_inverse_and_hyperbolic_special_values(name):
    special = [0.0, -0.0, 1e-30, -1e-38, 1.0, -1.0, 1.5, -2.0, 88.0, 89.5, -95.0, 1e10, -3e38]
    special += [np.inf, -np.inf, np.nan]
    x = np.resize(np.array(special, np.float32), 32)
    got = computed(name, x, 16)
    with np.errstate(all="ignore"):
        want = COMPOSED[name][0](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=name)
    finite = np.isfinite(want)
    assert ulp_error(got[finite], x[finite], COMPOSED[name][0]) <= COMPOSED[name][2]
    zeros = (x == 0) & (want == 0)  # odd functions keep the sign of zero
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=name)


def binary_on_llvm(name: str, x: np.ndarray, y: np.ndarray, lanes: int = 16) -> np.ndarray:
    import tensorforge as tf
    from tensorforge import te

    n = x.size
    a, b = te.placeholder((n,), name="a"), te.placeholder((n,), name="b")
    out = te.compute((n,), lambda i: getattr(te, name)(a[i], b[i]), name=name)
    s = te.create_schedule(out.op)
    s[out].vectorize(s[out].split(out.op.axis[0], factor=lanes)[1])
    fn = tf.build(s, [a, b, out], target="llvm")
    bufs = [tf.nd.array(x), tf.nd.array(y), tf.nd.empty((n,), "float32")]
    fn(*bufs)
    return bufs[2].numpy()


@pytest.mark.parametrize("name, reference", [("atan2", np.arctan2), ("hypot", np.hypot)])
def test_atan2_and_hypot_within_3_ulp_and_special_values(name, reference, rng):
    n = 8192 + 5  # (a tail)
    x = (rng.standard_normal(n) * 10.0 ** rng.uniform(-20, 20, n)).astype(np.float32)
    y = (rng.standard_normal(n) * 10.0 ** rng.uniform(-20, 20, n)).astype(np.float32)
    got = binary_on_llvm(name, x, y)
    want = reference(x.astype(np.float64), y.astype(np.float64))  # (te.atan2(y, x) as C's)
    spacing = np.maximum(np.spacing(np.abs(want.astype(np.float32))), np.spacing(np.float32(0)))
    assert np.max(np.abs(got - want) / spacing) <= 3
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 3e38], np.float32)
    sx, sy = (v.ravel() for v in np.meshgrid(special, special))
    got = binary_on_llvm(name, sx, sy, lanes=8)
    with np.errstate(over="ignore"):  # (hypot of 3e38 and 3e38 overflows: inf, as ours)
        want = reference(sx, sy).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=3e-7)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


def test_exp2_within_2_ulp_to_the_denormals_and_past_overflow(rng):
    x = np.concatenate([rng.uniform(-155, 130, 8192), rng.standard_normal(1024) * 1e-3])
    x = np.concatenate([x, [0.0, -0.0, 127.99, 128.0, -149.0, -150.5, np.inf, -np.inf, np.nan]])
    x = np.resize(x.astype(np.float32), (x.size // 16) * 16)
    assert ulp_error(computed("exp2", x, 16), x, np.exp2) <= 2
    assert ulp_error(computed("exp2", x, 1), x, np.exp2) <= 2


def test_erfc_stays_relative_into_its_tail():
    # 1 - erf(x) is 0 from x = 4 on in float32; erfc reaches 1e-44 at 10
    import math

    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    x = np.linspace(-4, 10.2, 2**16).astype(np.float32)
    x = np.concatenate(
        [x, np.array([0, -0.0, 1e-30, 30, -30, np.inf, -np.inf, np.nan], np.float32)]
    )
    x = np.resize(x, (x.size // 16) * 16)
    for lanes in (1, 16):
        assert ulp_error(computed("erfc", x, lanes), x, erfc) <= 5
