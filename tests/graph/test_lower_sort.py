"""sort (stable or not, descending, any dimension; argsort, msort), topk, kthvalue, median and mode as
kernels writing values and indices, against eager torch: ties, NaNs (greatest), -0.0, lines of
1, of a prime length, longer than the runs and the selection's blocks, every dtype, run-time
sizes, nvcc, the GPU (-m cuda). Values must equal eager's; indices too where torch defines
them (a stable sort), else they must point at equal values."""

import shutil

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import lower_sort, registry  # noqa: E402
from tensorforge.graph.registry import EAGER_ON_CPU  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import compile_fn, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back
    # the kernels the GPU takes, checked on the CPU too (there some run eagerly: the last test)
    monkeypatch.setattr(registry, "EAGER_ON_CPU", {})


def with_ties_nans_and_zeros(*shape, seed):
    x = (rand(*shape, seed=seed) * 4).round() / 4  # ties (and -0.0 beside 0.0)
    flat = x.view(-1)
    picks = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))
    flat[picks[:3]] = float("nan")
    flat[picks[3:6]] = -0.0
    return x


def same(got, expected) -> bool:
    return got.shape == expected.shape and (
        torch.equal(got, expected)
        or (got.is_floating_point() and torch.allclose(got, expected, 0, 0, equal_nan=True))
    )


def check_pairs(fn, x, exact=(), dims=None):
    """fn(x) -> (values, indices) pairs: values equal eager's, indices eager's for the pairs in
    `exact`, else x's elements there equal the values (dims[k]: the pair's dimension, and
    whether it was kept)."""
    compiled = compile_fn(fn, [x])
    got, expected = compiled([x]), fn(x)
    assert compiled.program.fallbacks == []
    assert len(got) == len(expected)
    for k in range(0, len(expected), 2):
        (values, indices), (eager_values, eager_indices) = got[k : k + 2], expected[k : k + 2]
        assert same(values, eager_values), f"pair {k // 2}: {values} against {eager_values}"
        assert indices.dtype == eager_indices.dtype and indices.shape == eager_indices.shape
        if k // 2 in exact:
            assert torch.equal(indices, eager_indices), f"pair {k // 2}"
            continue
        d, kept = dims[k // 2]
        at = indices if kept else indices.unsqueeze(d)
        picked = x.gather(d, at)
        assert same(picked, values if kept else values.unsqueeze(d)), f"pair {k // 2}"
    return compiled


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (2, 70, 3)])
def test_sorts_along_every_dimension(shape):
    x = with_ties_nans_and_zeros(*shape, seed=shape[0])
    last = len(shape) - 1

    def sorts(x):
        return (
            *torch.sort(x, dim=0, stable=True),
            *torch.sort(x, dim=last, stable=True, descending=True),
            *torch.sort(x, dim=last // 2 + 0, stable=True),
            *torch.sort(x, last),
        )

    compiled = check_pairs(sorts, x, exact=(0, 1, 2), dims={3: (last, True)})
    assert len(compiled.steps) == 4  # one kernel a sort, values and indices together
    # -0.0 and 0.0 are equal: a stable sort keeps them in line order, signs and all
    got = compiled([x])[0]
    assert torch.equal(got.signbit(), torch.sort(x, dim=0, stable=True)[0].signbit())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_sorts_of_other_floats(dtype):
    x = with_ties_nans_and_zeros(4, 45, seed=2).to(dtype)
    check_pairs(
        lambda x: (*torch.sort(x, dim=1, stable=True), *torch.topk(x, 4), *torch.median(x, 1)),
        x,
        exact=(0,),
        dims={1: (1, True), 2: (1, False)},
    )


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8])
def test_sorts_of_integers(dtype):
    a = torch.randint(0, 5, (3, 131), generator=torch.Generator().manual_seed(1)).to(dtype)
    check_pairs(
        lambda a: (
            *torch.sort(a, dim=1, stable=True, descending=True),
            *torch.sort(a, dim=0, stable=True),
            *torch.topk(a, 3, 1),
            *torch.kthvalue(a, 60, 1),
        ),
        a,
        exact=(0, 1),
        dims={2: (1, True), 3: (1, False)},
    )


def test_sorts_of_bools():  # (eager's topk and kthvalue take no bools)
    a = torch.rand(4, 33, generator=torch.Generator().manual_seed(1)) > 0.5
    fn = lambda a: (
        *torch.sort(a, dim=1, stable=True),
        *torch.sort(a, dim=0, descending=True, stable=True),
    )  # noqa: E731
    check_pairs(fn, a, exact=(0, 1))


def test_argsort_and_msort():
    x = with_ties_nans_and_zeros(6, 33, seed=3)
    compiled = compile_fn(lambda x: (torch.argsort(x, dim=1, stable=True), torch.msort(x)), [x])
    got = compiled([x])
    assert torch.equal(got[0], torch.argsort(x, dim=1, stable=True))
    assert same(got[1], torch.msort(x))
    assert compiled.program.fallbacks == []


@pytest.mark.parametrize("k", [1, 16, 17])  # (16: the selection's most; 17 sorts)
def test_topk(k):
    x = with_ties_nans_and_zeros(3, 70, seed=k)
    x[1] = torch.arange(70.0)  # a rising line: each element enters the selection
    check_pairs(
        lambda x: (*torch.topk(x, k, 1), *torch.topk(x, min(k, 3), 0, largest=False)),
        x,
        dims={0: (1, True), 1: (0, True)},
    )


def test_topk_past_the_selection():
    # k past SELECT_K gathers candidates under a threshold, a quickselect keeping k of them
    # whenever its scratch (2k + 64) fills: a line of a prime length (a tail past the blocks),
    # a rising one (each element enters), a falling one (none does), one with more NaNs than k
    x = with_ties_nans_and_zeros(5, 331, seed=9) * 50
    x[1], x[2] = torch.arange(331.0), torch.arange(331.0).flip(0)
    x[3, ::7] = float("nan")
    fn = lambda x: (  # noqa: E731
        *torch.topk(x, 17, 1),
        *torch.topk(x, 40, 1, largest=False),
        *torch.topk(x, 60, 1),
    )
    check_pairs(fn, x, dims={0: (1, True), 1: (1, True), 2: (1, True)})
    a = x.nan_to_num(7.0).to(torch.int32)  # (ties)
    check_pairs(lambda a: tuple(torch.topk(a, 20, 1, largest=False)), a, dims={0: (1, True)})


def test_kthvalue_and_medians():
    x = with_ties_nans_and_zeros(4, 61, seed=4)
    x[0, 7] = x[0, 7] + 0.0  # a line without NaN, one with several
    x[0].nan_to_num_(0.25)
    x[2, :5] = float("nan")
    even = rand(6, 8, seed=5)  # (the lower of the two middles)

    def fn(x):
        return (
            *torch.kthvalue(x, 1, 1),
            *torch.kthvalue(x, 61, 1, keepdim=True),
            *torch.kthvalue(x, 30, 1),
            *torch.median(x, 1),
            *torch.median(x, 0, keepdim=True),
        )

    dims = {0: (1, False), 1: (1, True), 2: (1, False), 3: (1, False), 4: (0, True)}
    check_pairs(fn, x, dims=dims)
    check_pairs(lambda x: tuple(torch.median(x, 1)), even, dims={0: (1, False)})
    for whole in (x, even, x[1:2, :9].clone()):
        compiled = compile_fn(lambda x: torch.median(x), [whole])
        assert same(compiled([whole])[0], torch.median(whole))


def test_nanmedian():
    # the middle (the lower of two) of a line's elements that are not NaN; a line of NaNs
    # gives NaN (eager's index: one of them); the whole tensor's too
    x = with_ties_nans_and_zeros(5, 24, seed=10)
    x[0] = float("nan")
    x[1, :9] = float("nan")  # 15 left
    x[2].nan_to_num_(0.5)
    x[3, ::2] = float("nan")  # 12 left (even)
    fn = lambda x: (*torch.nanmedian(x, 1), *torch.nanmedian(x, 0, keepdim=True))  # noqa: E731
    check_pairs(fn, x, dims={0: (1, False), 1: (0, True)})
    whole = compile_fn(lambda x: torch.nanmedian(x), [x])
    for y in (x, x.nan_to_num(0.25), torch.full_like(x, float("nan"))):  # (NaNs alone: NaN)
        assert same(whole([y])[0], torch.nanmedian(y))


def test_mode():
    # the most frequent value, the smallest of those as frequent (-0.0 equal to 0.0); the
    # index one of its positions (torch's choice among them is unspecified)
    a = torch.randint(0, 6, (5, 37), generator=torch.Generator().manual_seed(0))
    x = torch.tensor([[0.0, -0.0, 1.0, 2.0, 2.0, 0.0], [3.0, 1.0, 1.0, 3.0, -1.0, 5.0]])
    dims = {0: (1, False), 1: (0, True)}
    check_pairs(lambda a: (*torch.mode(a, 1), *torch.mode(a, 0, keepdim=True)), a, dims=dims)
    check_pairs(lambda x: tuple(torch.mode(x, 1)), x, dims=dims)


def test_run_time_sizes():
    def fn(x):
        return (*torch.sort(x, dim=1, stable=True), *torch.topk(x, 2), *torch.median(x, 1))

    fast, nothing_eager = dynamic(fn)
    for n, m in ((5, 40), (3, 17), (2, 3)):
        x = with_ties_nans_and_zeros(n, m, seed=m)
        got, expected = fast(x), fn(x)
        assert same(got[0], expected[0]) and torch.equal(got[1], expected[1])
        assert same(got[2], expected[2]) and same(got[4], expected[4])
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a"])
def test_cuda_builds_compile_with_nvcc(arch):
    def fn(x):
        return (
            *torch.sort(x, dim=1, stable=True, descending=True),
            *torch.topk(x, 3),
            *torch.topk(x, 20, 1, largest=False),
            *torch.kthvalue(x, 3, 0),
            *torch.median(x, 1),
            torch.median(x[:, :12]),  # (60 elements: at most CUDA_LINE)
        )

    assert nvcc_problem(fn, [rand(5, 37, seed=6)], arch) is None
    assert nvcc_problem(fn, [rand(5, 37, seed=6).half()], arch) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_block_sorts_compile_with_nvcc(monkeypatch):
    # lines past CUDA_LINE, a CUDA block each (BLOCK_SORT_LINE: off until timed on a GPU)
    monkeypatch.setattr(lower_sort, "BLOCK_SORT_LINE", 2048)

    def fn(x):
        return (
            *torch.sort(x, dim=1, stable=True, descending=True),
            *torch.topk(x, 30, 1, largest=False),
            *torch.sort(x, dim=0),
        )

    assert nvcc_problem(fn, [rand(70, 300, seed=12)], "sm_90a") is None


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("shape", [(5, 65), (300, 2048), (2, 1000)])
def test_block_sorts_match_eager_on_the_gpu(monkeypatch, shape):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    monkeypatch.setattr(lower_sort, "BLOCK_SORT_LINE", 2048)

    def fn(x):
        return (
            *torch.sort(x, dim=1, stable=True),
            *torch.sort(x, dim=1, stable=True, descending=True),
            *torch.topk(x, 40, 1),
            *torch.topk(x, 3, 1, largest=False),
        )

    x = with_ties_nans_and_zeros(*shape, seed=13).cuda()
    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(target="cuda"))
    assert compiled.program.fallbacks == []
    got, expected = compiled([x]), fn(x)
    for k in (0, 2):  # stable: torch's indices
        assert same(got[k], expected[k]) and torch.equal(got[k + 1], expected[k + 1])
    for k in (4, 6):
        assert same(got[k], expected[k])
        assert same(x.gather(1, got[k + 1]), got[k])


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("shape", [(3, 61), (1000, 64)])
def test_sorts_match_eager_on_the_gpu(shape):
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    def fn(x):
        return (
            *torch.sort(x, dim=1, stable=True),
            *torch.sort(x, dim=0, stable=True, descending=True)[0:1],
            *torch.topk(x, 5),
            *torch.kthvalue(x, 7, 1),
            *torch.median(x, 1),
        )

    x = with_ties_nans_and_zeros(*shape, seed=7)[:, : min(shape[1], 64)]
    x = x[: min(shape[0], 64)].contiguous().cuda()
    gm = make_fx(fn, decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(target="cuda"))
    assert compiled.program.fallbacks == []  # (lines of at most CUDA_LINE)
    got, expected = compiled([x]), fn(x)
    assert same(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert same(got[2], expected[2])
    for k, d, kept in ((3, 1, True), (5, 1, False), (7, 1, False)):
        assert same(got[k], expected[k])
        at = got[k + 1] if kept else got[k + 1].unsqueeze(d)
        assert same(x.gather(d, at), got[k] if kept else got[k].unsqueeze(d))


def test_what_loses_to_eager_runs_eagerly_on_the_cpu(monkeypatch):
    # lines of at most 16, topk of k past 16, the whole tensor's median; the rest are kernels
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x = rand(3, 40, seed=8)

    def fn(x):
        return (
            *torch.sort(x, dim=1, stable=True),  # a kernel
            *torch.sort(x, 0),
            *torch.topk(x, 17),
            *torch.topk(x, 4),  # a kernel
            *torch.median(x, 0),
            torch.median(x),
        )

    compiled = compile_fn(fn, [x])
    assert len(compiled.program.fallbacks) == 4, compiled.program.fallbacks
    got, expected = compiled([x]), fn(x)
    assert all(same(g, e) for g, e in zip(got, expected))
