"""argmax / argmin, max / min along a dimension with their indices, and prod as kernels (they ran
eagerly: the graph fuzzer's declines), against eager torch: ties (the first index), NaN (it
wins), 0-d and 1-element tensors, long rows, integers, bfloat16, run-time sizes, nvcc."""

import shutil

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def index_reductions(x):
    return (
        x.argmax(), x.argmin(), x.argmax(1), x.argmin(-1, keepdim=True), x.argmax(0),
        x.argmax(keepdim=True), *x.max(1), x.min(2, keepdim=True)[1], x.max(-1)[1] * 2,
    )  # fmt: skip


def products(x):
    return x.prod(1), x.prod(), x.prod(-1, keepdim=True), x.prod(0) * 2


def with_ties_and_nan(seed):
    x = rand(3, 5, 7, seed=seed)
    x[2, 3, :] = 0.5  # a row of ties
    x[1, :, 4] = x[1].max() + 1  # a column of ties of the largest
    x[0, 1, 2] = x[0, 3, 5] = float("nan")  # NaN wins, the first of two
    return x


def test_argmax_argmin_and_max_with_indices_are_kernels():
    check(index_reductions, rand(3, 5, 7, seed=1))
    check(index_reductions, with_ties_and_nan(2))
    check(index_reductions, -with_ties_and_nan(3))
    x = torch.tensor([1.0, float("inf"), float("nan"), float("-inf")]).reshape(1, 4, 1)
    check(index_reductions, x.expand(2, 4, 3).contiguous())  # NaN after an inf: still NaN


def test_integers_and_small_tensors():
    a = torch.randint(-5, 5, (4, 13, 3), generator=torch.Generator().manual_seed(4))
    check(lambda a: (*index_reductions(a), *products(a)), a)  # (few values: many ties)
    check(lambda a: (*index_reductions(a), *products(a)), rand(1, 1, 1, seed=5))
    zero_d = torch.tensor(0.7)
    check(lambda a: (a.argmax(), a.argmin(0), a.prod(), *a.max(0)), zero_d)


def test_long_rows():
    x = 1 + rand(3, 4099, seed=6) * 1e-3  # products near 1: no overflow in 4099 terms
    check(lambda x: (x.argmax(1), x.argmin(0), x.prod(1), x.prod(0), x.argmax()), x, rtol=1e-4)


def test_bfloat16():
    x = with_ties_and_nan(7).bfloat16()
    compiled = check(index_reductions, x)
    assert compiled.program.fallbacks == []
    near_one = (1 + rand(5, 17, seed=8) * 0.1).bfloat16()
    expected, reference = products(near_one), products(near_one.float())
    got = check(products, near_one, rtol=2e-2)([near_one])
    eps = torch.finfo(torch.bfloat16).eps
    for g, e, r in zip(got, expected, reference):  # within twice eager's error (+ an eps)
        scale = r.abs().max()
        ours, eagers = (g.float() - r).abs().max() / scale, (e.float() - r).abs().max() / scale
        assert ours <= 2 * eagers + eps


def test_run_time_sizes():
    def fn(x, a):
        return (*index_reductions(x), *products(x * 0.1 + 1), *index_reductions(a), a.prod(1))

    fast, nothing_eager = dynamic(fn)
    for n, m in ((5, 7), (13, 3)):
        x = with_ties_and_nan(n)[:, :, :m].repeat(n, 1, 1)
        a = torch.randint(-3, 3, (n, m, 2), generator=torch.Generator().manual_seed(n))
        for got, expected in zip(fast(x, a), fn(x, a)):
            torch.testing.assert_close(got, expected, equal_nan=True)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_builds_compile_with_nvcc(arch):
    x = with_ties_and_nan(9)
    assert nvcc_problem(lambda x: (*index_reductions(x), *products(x)), [x], arch) is None
    long = rand(3, 4099, seed=10)
    assert nvcc_problem(lambda x: (x.argmax(1), x.prod(1), *x.max(1)), [long], arch) is None
    a = torch.randint(-5, 5, (4, 13, 3))
    assert nvcc_problem(lambda a: (*index_reductions(a), a.prod(1)), [a], arch) is None
    assert nvcc_problem(index_reductions, [x.bfloat16()], arch) is None


def test_bfloat16_ties_are_eagers():
    # x + 100 rounds 101.0 and 101.0078 to one bfloat16 value: a tie, the first index, as eager
    # (read unrounded from the fused chain, the second won)
    x = torch.tensor([[1.0, 1.0078125, 0.5], [0.5, 1.0078125, 1.0]]).bfloat16()

    def fn(x):
        return (x + 100).argmax(1), (x + 100).max(1)[1], (-x - 100).argmin(1), (x + 100).argmax()

    check(fn, x)
