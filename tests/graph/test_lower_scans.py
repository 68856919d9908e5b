"""cumsum as kernels (it ran eagerly: the graph fuzzer's declines), against eager torch: along
every dimension, one block and many (blocks of 16: 131 and 4099 elements; 64 at run-time
sizes), integers and bools (int64 sums), bfloat16, a 0-d tensor, run-time sizes, nvcc."""

import shutil

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, compile_fn, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def every_dimension(x):
    return tuple(x.cumsum(d) for d in range(x.dim())) + (x.cumsum(-1) * 2,)


@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 1), (3, 131), (4099, 2), (2, 65, 3)])
def test_cumsum_along_every_dimension(shape):
    check(every_dimension, rand(*shape, seed=sum(shape)))


def test_integers_bools_and_a_0d_tensor():
    a = torch.randint(-50, 50, (4, 70, 3), generator=torch.Generator().manual_seed(1))
    check(lambda a: (*every_dimension(a), (a > 0).cumsum(1), a.int().cumsum(0)), a)
    check(lambda x: (x.cumsum(0), x.cumsum(-1, dtype=torch.float64)), torch.tensor(0.5))


def test_bfloat16_is_as_accurate_as_eager():
    check_bfloat16(every_dimension, rand(3, 300, seed=2).bfloat16())


def test_run_time_sizes():
    def fn(x, a):
        return (*every_dimension(x), *every_dimension(a))

    fast, nothing_eager = dynamic(fn)
    for n, m in ((5, 200), (13, 3), (2, 64), (3, 65)):  # one block, many, a partial last one
        x = rand(n, m, seed=n)
        a = torch.randint(-9, 9, (n, m), generator=torch.Generator().manual_seed(m))
        for got, expected in zip(fast(x, a), fn(x, a)):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_builds_compile_with_nvcc(arch):
    for x in (rand(3, 5, 7, seed=3), rand(3, 131, seed=4), rand(2, 9, seed=5).bfloat16()):
        assert nvcc_problem(every_dimension, [x], arch) is None
    a = torch.randint(-50, 50, (4, 70))
    assert nvcc_problem(every_dimension, [a], arch) is None
    long_rows = rand(3, 300, seed=6)  # (logcumsumexp's blocks of running-max shifts)
    assert nvcc_problem(lambda x: (torch.logcumsumexp(x, 1),), [long_rows], arch) is None


def test_the_blocked_sums_keep_the_rules_schedule():
    # the first guess took 100x longer on the block sums (64 x 4099: 14.7 ms against 78 us)
    from tensorforge.graph.program import BuiltKernel
    from tensorforge.graph.schedules import SOURCES

    compiled = compile_fn(lambda x: x.cumsum(-1), [rand(4, 300, seed=6)])
    sources = [s.source for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert sources == [SOURCES["scan"]] * 5  # block sums twice, carries twice, the prefixes
