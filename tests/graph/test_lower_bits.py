"""Bitwise and/or/xor and shifts of integers, copysign, signbit, nextafter, ldexp, angle, clamp by
tensors and rrelu in inference as kernels (they ran eagerly), against eager torch: every integer
type, shift counts past the width and negative, signed zeros and NaN's sign, broadcasting,
empty tensors, half types, run-time sizes."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, compile_fn, rand  # noqa: E402

INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def ints(shape, dtype, seed, low=None, high=None):
    info = torch.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g, dtype=torch.int64).to(dtype)


def bits(a, b, c):
    return (
        a & b, a | b, a ^ b, a & 3, torch.bitwise_or(a, 300), a ^ -1, c & a,
        a << c, a >> c, a << 3, a >> 1, torch.bitwise_left_shift(a, c[:1]),
        torch.bitwise_right_shift(b, 5),
    )  # fmt: skip


@pytest.mark.parametrize("dtype", INTS)
def test_bitwise_and_shifts_of_every_integer_type(dtype):
    width = torch.iinfo(dtype).bits
    a, b = ints((3, 37), dtype, 1), ints((1, 37), dtype, 2)
    low = 0 if dtype == torch.uint8 else -3
    c = ints((3, 1), dtype, 3, low, width + 3)  # counts past the width and negative
    c[0, 0], c[1, 0] = width, width - 1
    check(bits, a, b, c)


def test_bools_int_promotion_and_empty():
    a, b = ints((5, 7), torch.int16, 4), ints((5, 7), torch.int64, 5, -70, 70)
    m = a > 0
    check(lambda a, b, m: (a & b, a << b, a >> b, m & (b > 3), m ^ m, m | (a < 0)), a, b, m)
    e = ints((0, 3), torch.int32, 6)
    check(lambda e: (e & 5, e << 2, e ^ e), e)


def signs(x, y):
    return (
        torch.copysign(x, y), torch.copysign(x, -2.0), torch.signbit(x), torch.signbit(y),
        torch.nextafter(x, y), torch.angle(x), torch.angle(y) + 1,
    )  # fmt: skip


def test_copysign_signbit_nextafter_angle():
    nan, inf = float("nan"), float("inf")
    special = [0.0, -0.0, nan, -nan, inf, -inf, 1e-45, -1e-45, 3.4e38, -1.0]
    x = torch.cat([rand(31, seed=7), torch.tensor(special)])
    y = torch.cat([rand(31, seed=8), torch.tensor(special[::-1])])
    compiled = compile_fn(signs, [x, y])
    for g, e in zip(compiled([x, y]), signs(x, y)):
        assert g.dtype == e.dtype
        assert torch.equal(g.isnan(), e.isnan())
        same = ~e.isnan()
        assert torch.equal(g[same], e[same]) and torch.equal(g.signbit(), e.signbit())
    # (nextafter of float32 runs eagerly on the CPU: eager's is faster)
    assert [r for *_, r in compiled.program.fallbacks] == [
        "aten.nextafter.default of float32 / float64 on the CPU (eager torch's is faster)"
    ]
    i = ints((4, 5), torch.int32, 9, -4, 4)
    check(lambda i: (torch.angle(i), torch.signbit(i), torch.copysign(i, -1)), i)
    check(lambda x: (torch.copysign(x, x[:1]), torch.signbit(x)), rand(1, 5, seed=10).double())


def clamps(x, lo, hi):
    return (
        torch.clamp(x, lo, hi), torch.clamp(x, min=lo), torch.clamp(x, max=hi),
        torch.clamp_min(x, lo), torch.clamp_max(x, hi[:1]), F.rrelu(x, 0.1, 0.3, training=False),
    )  # fmt: skip


def test_clamp_by_tensors_and_rrelu():
    x, lo, hi = rand(5, 11, seed=11), rand(5, 1, seed=12) - 0.5, rand(5, 11, seed=13)
    x[0, 0], lo[1, 0], hi[2, 3] = float("nan"), float("nan"), float("nan")
    check(clamps, x, lo, hi)  # (lo > hi in places: hi wins)
    i = ints((3, 7), torch.int32, 14, -9, 9)
    check(lambda i, lo: (torch.clamp(i, lo), torch.clamp(i, i - 1, lo)), i, lo[:3].double())
    half = [t.bfloat16() for t in (x, lo, hi)]
    check_bfloat16(lambda x, lo, hi: (torch.clamp(x, lo, hi), torch.copysign(x, lo)), *half)


def run_time_sized(a, b, x, y):
    return a & b, a << (b & 7), x.clamp(y, y + 1), F.cosine_similarity(x, y), F.normalize(x)


def test_run_time_sizes_and_cosine_similarity():
    fast, nothing_eager = dynamic(run_time_sized)  # (Dynamo's graphs: clamp_min.Tensor)
    for n in (3, 8):
        a, b = ints((n, 5), torch.int32, n), ints((n, 5), torch.int32, n + 1)
        x, y = rand(n, 5, seed=n), rand(n, 1, seed=n + 2)
        for g, w in zip(fast(a, b, x, y), run_time_sized(a, b, x, y)):
            assert torch.allclose(g, w, rtol=1e-5, atol=1e-6)
    nothing_eager()


def scalings(x, e):
    return torch.ldexp(x, e), torch.ldexp(x.half(), e - 20), torch.ldexp(x.double(), e * 9)


def test_ldexp_by_tensors():
    x = torch.cat([rand(3, 31, seed=11) * 10, torch.tensor([[0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0]] * 3)], 1)  # fmt: skip
    e = ints((3, 1), torch.int32, 12, -160, 140)  # 2^e underflows and overflows too
    check(scalings, x, e)


def gaps(a, b, c, x, y):
    """Each operator of this file's in one graph: the nvcc build and GPU run cases."""
    return (*bits(a, b, c), *signs(x, y), *clamps(x, y[:1], y), *scalings(x[:3], c))


def gap_inputs():
    a, b = ints((3, 37), torch.int32, 1), ints((1, 37), torch.int32, 2)
    c = ints((3, 1), torch.int32, 3, -3, 35)
    return [a, b, c, rand(5, 37, seed=4), rand(5, 37, seed=5)]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_the_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    inputs = [t.cuda() for t in gap_inputs()]
    gm = make_fx(gaps, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target="cuda"))
    for k, (got, want) in enumerate(zip(compiled(inputs), gaps(*inputs))):
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True), k
    assert compiled.program.fallbacks == []


def every_half(dtype):
    """All 65536 values of a half type (NaNs, infs, subnormals, both zeros)."""
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)


def same_bits(got, want):
    assert got.dtype == want.dtype and torch.equal(got.isnan(), want.isnan())
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    number = ~want.isnan()
    assert torch.equal(got.view(ints)[number], want.view(ints)[number])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_nextafter_and_frexp_of_every_half_value(dtype):
    x = every_half(dtype)
    y = x[torch.randperm(x.numel(), generator=torch.Generator().manual_seed(1))]
    y[:4] = torch.tensor([float("inf"), float("-inf"), 0.0, -0.0])
    compiled = compile_fn(lambda x, y: (torch.nextafter(x, y), *torch.frexp(x)), [x, y])
    after, mantissa, exponent = compiled([x, y])
    same_bits(after, torch.nextafter(x, y))
    same_bits(mantissa, torch.frexp(x).mantissa)
    assert torch.equal(exponent, torch.frexp(x).exponent)
    # of a value computed in the kernel: rounded to the half type first, as eager's
    h = x[::97].clone()
    check(lambda h, y: (*torch.frexp(h * 3), torch.nextafter(h * 3, y)), h, y[::97].clone())


@pytest.mark.parametrize(
    "dtype, ints", [(torch.float32, torch.int32), (torch.float64, torch.int64)]
)
def test_frexp_of_random_bits_subnormals_and_powers_of_two(dtype, ints):
    g = torch.Generator().manual_seed(2)
    info = torch.iinfo(ints)
    x = torch.randint(info.min, info.max, (4001,), generator=g, dtype=ints).view(dtype)
    powers = torch.ldexp(torch.ones(320, dtype=dtype), torch.arange(-160, 160))
    tiny = torch.finfo(dtype).smallest_normal * torch.tensor([2.0**-23, 0.5, 0.75], dtype=dtype)
    x = torch.cat([x, powers, torch.nextafter(powers, torch.zeros(1, dtype=dtype)), tiny,
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan")], dtype=dtype)])  # fmt: skip
    mantissa, exponent = compile_fn(torch.frexp, [x])([x])
    same_bits(mantissa, torch.frexp(x).mantissa)
    assert torch.equal(exponent, torch.frexp(x).exponent)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.uint8])
def test_gcd_and_lcm_of_integers(dtype):
    info = torch.iinfo(dtype)
    a = ints((3, 29), dtype, 15)  # 87 elements: groups of 4 and a tail of 3
    b = ints((1, 29), dtype, 16, 0 if dtype == torch.uint8 else -300, 300)
    a[0, :4] = torch.tensor([0, 0, info.min, info.max]).to(dtype)
    b[0, :4] = torch.tensor([0, 6, 6, info.max]).to(dtype)
    c = a.clone()
    c[1, :] = info.min  # the minimum's |.| wraps: eager's signed steps
    compiled = compile_fn(
        lambda a, b, c: (torch.gcd(a, b), torch.lcm(a, b), torch.gcd(b, c)), [a, b, c]
    )
    for got, want in zip(compiled([a, b, c]), (torch.gcd(a, b), torch.lcm(a, b), torch.gcd(b, c))):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert compiled.program.fallbacks == []


def new_kernels(x, h, b, a, c):
    """frexp, half nextafter, gcd and lcm: the nvcc build and GPU run cases."""
    return (
        *torch.frexp(x),
        *torch.frexp(h),
        torch.nextafter(h, b),
        torch.gcd(a, c),
        torch.lcm(a, c),
    )


def new_kernel_inputs():
    x = torch.cat([rand(37, seed=20) * 100, torch.tensor([0.0, -0.0, 1e-45, float("inf"), float("nan")])])  # fmt: skip
    h = every_half(torch.float16)[::613].clone()
    a, c = ints((3, 37), torch.int64, 21, -500, 500), ints((1, 37), torch.int64, 22, -500, 500)
    return [x, h, h.flip(0), a, c]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_new_kernels_compile_with_nvcc():
    from tests.graph.test_lower_math import nvcc_problem

    assert nvcc_problem(new_kernels, new_kernel_inputs(), "sm_90a") is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_new_kernels_on_the_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    inputs = [t.cuda() for t in new_kernel_inputs()]
    gm = make_fx(new_kernels, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target="cuda"))
    for k, (got, want) in enumerate(zip(compiled(inputs), new_kernels(*inputs))):
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert torch.equal(got.isnan(), want.isnan()) if got.is_floating_point() else True, k
        assert torch.equal(got[~want.isnan()] if got.is_floating_point() else got, want[~want.isnan()] if want.is_floating_point() else want), k  # fmt: skip
    assert compiled.program.fallbacks == []
