"""bucketize, searchsorted and histc as counts, against eager torch: left and right, out_int32,
a sequence per row, sorter=, ties among the boundaries, NaN values, values on a boundary or an
edge; a long sequence, many bins and a range from the data run eagerly on the CPU."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_lowering import check, compile_fn, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def buckets(v, boundaries, rows):
    s = rows.sort(-1).values
    return (
        torch.bucketize(v, boundaries), torch.bucketize(v, boundaries, right=True, out_int32=True),
        torch.searchsorted(s, v), torch.searchsorted(s, v, side="right"),
        torch.searchsorted(rows, v, sorter=rows.argsort(-1)),
        torch.searchsorted(boundaries, v, right=True),
    )  # fmt: skip


def inputs(seed):
    v = rand(5, 33, seed=seed)
    v[0, :4] = torch.tensor([0.0, float("nan"), 1.0, -0.5])  # on boundaries, NaN
    boundaries = torch.tensor([-1.0, -0.5, 0.0, 0.0, 0.3, 1.0])  # a tie
    return [v, boundaries, rand(5, 9, seed=seed + 1)]


def test_bucketize_and_searchsorted():
    check(buckets, *inputs(1), fallbacks=2)  # (the sort and argsort run eagerly)


def test_histc():
    x = rand(7, 33, seed=6)
    x[0, :4] = torch.tensor([-1.0, 1.0, float("nan"), 0.5])  # the edges, NaN (not counted)

    def fn(x):
        return torch.histc(x, 5, -1, 1), torch.histc(x.double(), 17, -2.5, 3)

    check(fn, x)


def test_histc_of_many_bins_and_of_the_datas_range_on_the_cpu():
    x = rand(40009, seed=7) * 3  # several tasks, the last one's block partial
    x[:3] = torch.tensor([-1.0, 1.0, 0.0])  # the edges exactly

    def fn(x, same):
        return (
            torch.histc(x, 257, -1, 1), torch.histc(x, 100), torch.histc(x[:7].double(), 3, 2, 2),
            torch.histc(same, 10), torch.histc(x[:1], 1),
        )  # fmt: skip

    compiled = compile_fn(fn, [x, torch.full((13,), 2.5)])
    for got, want in zip(compiled([x, torch.full((13,), 2.5)]), fn(x, torch.full((13,), 2.5))):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert compiled.program.fallbacks == []


def test_long_sequences_run_eagerly_on_the_cpu():
    def fn(v, s):
        return torch.bucketize(v, s), torch.histc(v, 33, -1, 1), torch.histc(v, 4)

    compiled = compile_fn(fn, [rand(7, seed=3), rand(65, seed=4)])
    assert [r for _, _, r in compiled.program.fallbacks] == [
        "a search of a sequence of 65 elements on the CPU",
    ]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_bucketize_and_searchsorted_match_eager_on_the_gpu():
    from tests.graph.test_lower_fold import on_the_gpu

    def fn(v, boundaries, rows):  # (without the sorts, which have no kernel)
        return (
            torch.bucketize(v, boundaries, right=True), torch.searchsorted(rows, v[:, :9]),
            torch.histc(v, 100, -1, 1),
        )  # fmt: skip

    v, boundaries, rows = inputs(2)
    # rows sorted before the call: a search of an unsorted sequence is undefined (the H200 run
    # compared our count with eager's binary search over unsorted rows)
    on_the_gpu(fn, [v, boundaries, rows.sort(-1).values], rtol=0)
