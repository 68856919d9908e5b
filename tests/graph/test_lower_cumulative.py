"""cumprod, cummax / cummin (values and indices) and logcumsumexp as kernels (they ran eagerly),
against eager torch: one block and many, ties (the later index), NaN (it sticks; each later NaN
takes the index), -inf and +inf in logcumsumexp, integers, bfloat16 / float16, empty and 0-d
tensors, run-time sizes; on the GPU (-m cuda)."""

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import registry  # noqa: E402
from tensorforge.graph.registry import EAGER_ON_CPU  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back
    # the kernels the GPU takes, checked on the CPU too (there they run eagerly: the last test)
    monkeypatch.setattr(registry, "EAGER_ON_CPU", {})


def scans(x):
    return (
        x.cumprod(-1),
        x.cumprod(0),
        torch.logcumsumexp(x, -1),
        *x.cummax(-1),
        *x.cummin(0),
        *x.cummin(-1),
        *x.cummax(0),
    )


def with_ties_and_nans(*shape, seed):
    x = (rand(*shape, seed=seed) * 4).round() / 4  # ties
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:3]] = float(
        "nan"
    )
    return x


@pytest.mark.parametrize("shape", [(3, 131), (67, 2), (1, 1)])  # many blocks, one, one element
def test_float_scans_with_ties_and_nans(shape):
    x = with_ties_and_nans(*shape, seed=shape[0])
    check(scans, x)  # (3 NaNs: most rows' products stay finite, to compare)


def test_logcumsumexp_of_infinities_and_a_0d_tensor():
    x = torch.tensor([[-float("inf")] * 3 + [0.5, -float("inf"), 1.0], [float("inf"), 2.0] * 3])
    check(lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)), x)
    check(lambda x: (torch.logcumsumexp(x, 0), x.cumprod(0), *x.cummax(0)), torch.tensor(0.5))


def test_logcumsumexp_of_long_rows_infinities_and_wide_ranges():
    # rows of 300 (19 blocks, the last partial: the carries' own scan in blocks too): -inf
    # first, +inf, NaN, terms 1000 below the next one (none may underflow)
    inf = float("inf")
    x = rand(4, 300, seed=6) * 30
    x[0, :20] = -inf
    x[0, 40], x[1, 17], x[3, 200:] = inf, float("nan"), -inf
    x[2, ::7] -= 1000
    check(lambda x: (torch.logcumsumexp(x, 1),), x)


def test_integers_and_empty_tensors():
    a = torch.randint(-3, 4, (5, 70), generator=torch.Generator().manual_seed(3))
    check(lambda a: (*a.cummax(1), *a.cummin(0), a.cumprod(0), a.int().cumprod(1)), a)
    check(scans, rand(0, 7, seed=1))


def test_half_types_are_as_accurate_as_eager():
    x = rand(3, 80, seed=4) + 1.0
    check_bfloat16(scans, x.bfloat16())
    check(lambda h: (*h.cummax(1), *h.cummin(0)), x.half())  # (exact: values as stored)


def test_run_time_sizes():
    def fn(x, a):
        return (*scans(x), *a.cummax(1), a.cumprod(1))

    fast, nothing_eager = dynamic(fn)
    for n, m in ((5, 200), (13, 3), (3, 65)):  # one block, many, a partial last one
        x = with_ties_and_nans(n, m, seed=n)
        a = torch.randint(-2, 3, (n, m), generator=torch.Generator().manual_seed(m))
        for got, expected in zip(fast(x, a), fn(x, a)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    nothing_eager()


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("shape", [(3, 131), (64, 4099)])
def test_scans_match_eager_on_the_gpu(shape):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    x = with_ties_and_nans(*shape, seed=5).cuda()
    gm = make_fx(scans, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(target="cuda"))
    for got, expected in zip(compiled([x]), scans(x)):
        torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-5, equal_nan=True)


def test_cummax_and_cummin_of_short_lines_run_eagerly_on_the_cpu(monkeypatch):
    # slower than eager torch's there (lines of at most 64); longer lines are one kernel
    # writing values and indices, as are cumsum, cumprod and logcumsumexp
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x = rand(5, 37, seed=3)
    check(
        lambda x: (x.cumsum(1), x.cumprod(0), *x.cummax(1), torch.logcumsumexp(x, 1)),
        x,
        fallbacks=1,
    )
    long_lines = with_ties_and_nans(3, 301, seed=4)  # (blocks of 8, a partial last one)
    compiled = check(lambda x: (*x.cummax(1), *x.cummin(0)), long_lines)
    assert len(compiled.steps) == 2  # one kernel each


def test_cummax_blocks_of_equal_runs_and_late_nans():
    # the kernel skips whole blocks of elements none of which is taken: a rising line takes
    # every element, a constant one each (ties take the later index), a NaN late in a block
    rising = torch.arange(70.0).repeat(2, 1)
    x = torch.cat([rising, torch.full((2, 70), 0.5), rand(2, 70, seed=5)])
    x[5, 61] = float("nan")
    check(lambda x: (*x.cummax(1), *x.cummin(1)), x)
