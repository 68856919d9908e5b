"""Operators that ran eagerly (the graph fuzzer's declines) lowered to kernels: log1p, expm1 (and
ELU, SELU, CELU through it), hypot, atan2, remainder, fmod, round, trunc; each against eager torch on
random data (negative values, odd extents), float32, bfloat16, integers where torch takes them,
run-time sizes, and built for CUDA (nvcc, no GPU)."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, compile_fn, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def pointwise_math(x, y):
    return (
        torch.log1p(x.abs()), torch.log1p(x.clamp(min=-0.9)), torch.expm1(x), F.elu(x),
        F.selu(x), F.celu(x, 0.5), F.elu(x, 2.0), torch.hypot(x, y), torch.atan2(x, y),
        torch.remainder(x, y), torch.fmod(x, y), torch.remainder(x, 1.5), torch.fmod(x, -1.5),
        2.5 % y, torch.round(x), torch.round(x, decimals=2), torch.round(x * 100, decimals=-1),
        torch.trunc(x),
    )  # fmt: skip


def integer_math(a, b):
    return (
        torch.remainder(a, b), torch.fmod(a, b), a % 3, torch.fmod(a, -4), -7 % b,
        torch.round(a), torch.remainder(a, 2.5), torch.trunc(a),
    )  # fmt: skip


def signed_divisors(*shape, seed):
    gen = torch.Generator().manual_seed(seed)
    magnitude = torch.randint(1, 7, shape, generator=gen)
    return magnitude * (torch.randint(0, 2, shape, generator=gen) * 2 - 1)


def test_pointwise_math_is_kernels():
    check(pointwise_math, rand(3, 5, 7, seed=1) * 3, rand(5, 7, seed=2) * 2)
    check(pointwise_math, rand(1, seed=3), rand(1, seed=4))


def test_special_values_as_torch():
    special = [0.0, -0.0, 1e-30, -1e-7, 3e-5, -0.5, -1.0, -2.0, 100.0, -100.0, 89.0]
    special += [float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(special)
    y = torch.tensor(special[::-1])

    def fn(x, y):
        return (
            torch.log1p(x), torch.expm1(x), torch.hypot(x, y), torch.atan2(x, y),
            torch.remainder(x, y), torch.fmod(x, y), torch.round(x), F.elu(x),
        )  # fmt: skip

    check(fn, x, y)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_remainder_fmod_and_round(dtype):
    # signs of both operands: remainder takes the divisor's, fmod the dividend's
    a = torch.randint(-50, 50, (4, 13), generator=torch.Generator().manual_seed(5)).to(dtype)
    check(integer_math, a, signed_divisors(13, seed=6).to(dtype))


def test_log1p_and_expm1_keep_small_values():
    # log(1 + x) and exp(x) - 1 lose small x entirely (1e-8: 0); a few ulp of float64's
    magnitude = torch.logspace(-12, 1.9, 4001)
    x = torch.cat([magnitude, -magnitude.clamp(max=0.999)]).float()
    compiled = compile_fn(lambda x: (torch.log1p(x), torch.expm1(x)), [x])
    for got, reference in zip(compiled([x]), (torch.log1p(x.double()), torch.expm1(x.double()))):
        relative = ((got.double() - reference).abs() / reference.abs()).max().item()
        assert relative < 4 * torch.finfo(torch.float32).eps / 2, relative
    assert compiled.program.fallbacks == []


def test_bfloat16_is_as_accurate_as_eager():
    # against float32 on the same bfloat16 values: at most twice eager's error plus an eps
    x = (rand(5, 17, seed=7) * 3).bfloat16()
    y = (rand(17, seed=8) * 2).bfloat16()
    check_bfloat16(pointwise_math, x, y)


def test_run_time_sizes():
    def fn(x, y, a, b):
        return (*pointwise_math(x, y), *integer_math(a, b))

    fast, nothing_eager = dynamic(fn)
    for n, m in ((5, 7), (13, 3)):
        x, y = rand(n, m, seed=n) * 3, rand(m, seed=m) * 2
        a = torch.randint(-50, 50, (n, m), generator=torch.Generator().manual_seed(n))
        b = signed_divisors(m, seed=m)
        for got, expected in zip(fast(x, y, a, b), fn(x, y, a, b)):
            torch.testing.assert_close(got, expected, equal_nan=True)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_builds_compile_with_nvcc(arch):
    x, y = rand(3, 5, 7, seed=1) * 3, rand(5, 7, seed=2) * 2
    a, b = torch.randint(-50, 50, (4, 13)), signed_divisors(13, seed=6)
    for fn, inputs in ((pointwise_math, [x, y]), (integer_math, [a, b])):
        assert nvcc_problem(fn, inputs, arch) is None
    assert nvcc_problem(pointwise_math, [x.bfloat16(), y.bfloat16()], arch) is None


def nvcc_problem(fn, inputs, arch) -> str | None:
    """nvcc's complaint about `fn`'s kernels built for `arch` (None: every kernel compiles)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions
    from tensorforge.graph.program import BuiltKernel
    from tests.graph.graph_fuzz_nvcc import nvcc_errors

    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target=f"cuda -arch={arch.rstrip('a')}"))
    assert compiled.program.fallbacks == []
    modules = {id(s.module): s.module for s in compiled.steps if isinstance(s, BuiltKernel)}
    assert modules
    return nvcc_errors(list(modules.values()), arch)


def test_signed_zeros_as_torch():
    # -0.0 and 0.0 compare equal, so check() cannot tell them apart: the sign bits are compared
    x = torch.tensor([0.0, -0.0, -3.0, 3.0, -4.5, 4.5, -1e-30, 2.0, float("nan")])
    y = torch.tensor([1.0, -1.0, 3.0, -3.0, 1.5, -1.5, 3.0, float("inf"), 2.0])

    def fn(x, y):
        return (
            -x, torch.neg(x), torch.fmod(x, y), torch.fmod(x, 1.5), torch.remainder(x, y),
            torch.trunc(x), torch.round(x), x * 0,
        )  # fmt: skip

    compiled = check(fn, x, y)
    for k, (got, expected) in enumerate(zip(compiled([x, y]), fn(x, y))):
        number = ~expected.isnan()  # (a NaN's sign is not torch's promise)
        assert torch.equal(got[number].signbit(), expected[number].signbit()), f"{k}: {got}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_round_to_more_decimals_than_the_type_holds(dtype):
    # 10**40 (10**400) is inf in float32 (float64), as torch computes it: every result NaN; 30
    # overflows only large elements (inf), -38 rounds all to 0
    x = torch.tensor([1.5, -2.25, 0.0, 1e30, float("inf")], dtype=dtype)

    def fn(x):
        return tuple(torch.round(x, decimals=d) for d in (40, -40, 400, 30, -38))

    check(fn, x)
