"""Trigonometric, hyperbolic and other C-library functions (sin, cos, tan, their inverses,
sinh ... atanh, exp2, log10, erfc), log2, isinf, fmax / fmin and logical xor lowered to kernels
(they ran eagerly): each against eager torch on random data of both signs and odd extents,
special values, float32, bfloat16, integer inputs (made float), run-time sizes, built for CUDA
(nvcc, no GPU); and te's intrinsics on the LLVM and C backends against NumPy."""

import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge as tf  # noqa: E402
from tensorforge import te  # noqa: E402
from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def library_math(x, y):
    """x of either sign, y in (-1, 1) (the inverse functions' domains)."""
    return (
        torch.sin(x), torch.cos(x * 7), torch.tan(y), torch.asin(y), torch.acos(y),
        torch.atan(x), torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(x.abs() + 1),
        torch.atanh(y), torch.exp2(x), torch.log10(x.abs()), torch.log2(x.abs() + 0.5),
        torch.special.erfc(x), torch.fmax(x, y), torch.fmin(x, y * 3), torch.isinf(x / y),
        torch.logical_xor(x > 0, y > 0), (x > 1) ^ (y < 0),
    )  # fmt: skip


def inputs(*shape, seed):
    x = rand(*shape, seed=seed) * 3
    y = torch.rand(shape[-1], generator=torch.Generator().manual_seed(seed + 1)) * 1.98 - 0.99
    return x, y


def test_library_math_is_kernels():
    check(library_math, *inputs(3, 5, 7, seed=1), rtol=2e-6)
    check(library_math, *inputs(1, seed=3), rtol=2e-6)


def test_special_values_as_torch():
    special = [0.0, -0.0, 1e-30, -1e-7, 0.5, -1.0, 1.0, 2.0, -2.0, 100.0, -100.0, 1e5, -3e7]
    special += [float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(special)
    y = torch.tensor(special[::-1])

    def fn(x, y):
        return (
            torch.sin(x), torch.cos(x), torch.tan(x), torch.asin(x), torch.acos(x),
            torch.atan(x), torch.sinh(x), torch.cosh(x), torch.asinh(x), torch.acosh(x),
            torch.atanh(x), torch.exp2(x), torch.log10(x), torch.log2(x),
            torch.special.erfc(x), torch.fmax(x, y), torch.fmin(x, y), torch.isinf(x),
        )  # fmt: skip

    check(fn, x, y, rtol=2e-6)


def test_integers_are_made_float():
    a = torch.randint(-20, 20, (4, 9), generator=torch.Generator().manual_seed(4))

    def fn(a):
        return torch.sin(a), torch.exp2(a), torch.atan(a), torch.isinf(a), torch.fmax(a, a.flip(1))

    check(fn, a, rtol=2e-6)


def test_bfloat16_is_as_accurate_as_eager():
    # against float32 on the same bfloat16 values: at most twice eager's error plus an eps
    check_bfloat16(library_math, *(t.bfloat16() for t in inputs(5, 17, seed=7)))


def test_run_time_sizes():
    fast, nothing_eager = dynamic(library_math)
    for n, m in ((5, 7), (13, 3)):
        x, y = inputs(n, m, seed=n)
        for got, expected in zip(fast(x, y), library_math(x, y)):
            torch.testing.assert_close(got, expected, equal_nan=True, rtol=2e-6, atol=1e-6)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_builds_compile_with_nvcc(arch):
    x, y = inputs(3, 5, 7, seed=1)
    assert nvcc_problem(library_math, [x, y], arch) is None
    assert nvcc_problem(library_math, [x.bfloat16(), y.bfloat16()], arch) is None


NUMPY = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "exp2": np.exp2, "log10": np.log10,
}  # fmt: skip


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_te_intrinsics_on_the_cpu_backends(target, dtype):
    # vectorized over 8 lanes with a tail of 3: the per-lane calls and the scalar ones
    n = 19
    a = te.placeholder((n,), dtype, name="a")

    def applied(name):
        return te.compute((n,), lambda i: getattr(te, name)(a[i]), name=name)

    outs = [applied(name) for name in NUMPY]
    s = te.create_schedule([o.op for o in outs])
    for o in outs:
        s[o].vectorize(s[o].split(o.op.axis[0], factor=8)[1])
    fn = tf.build(s, [a, *outs], target=target)
    x = np.random.default_rng(0).uniform(-0.95, 0.95, n).astype(dtype)
    x[0] = 0.5  # (acosh's domain is >= 1: its lanes are NaN elsewhere, as numpy's)
    bufs = [tf.nd.array(x)] + [tf.nd.empty((n,), dtype) for _ in outs]
    fn(*bufs)
    with np.errstate(invalid="ignore"):
        for name, buf in zip(NUMPY, bufs[1:]):
            want = NUMPY[name](x.astype("float64"))
            np.testing.assert_allclose(buf.numpy(), want, rtol=4e-7 if dtype == "float32" else 1e-15, atol=1e-30, equal_nan=True, err_msg=name)  # fmt: skip
