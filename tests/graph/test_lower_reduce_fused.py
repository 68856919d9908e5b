"""CPU reductions over trailing dims read as one axis (lower_reduce._fused_trailing_dims: batch
norm's per-channel sums over N, H, W), against eager torch: odd and prime sizes, a vector's
tail, the middle dims alone, keepdim, indices over the flattened dims, ties and NaN, integers,
bfloat16, an empty dim."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def per_channel(x):
    return (
        x.sum([0, 2, 3]), x.mean([2, 3], keepdim=True), *torch.var_mean(x, [0, 2, 3]),
        x.amax([1, 2, 3]), x.sum([1, 2]), x.argmax(), (x * 2).sum(),
    )  # fmt: skip


def test_sums_over_trailing_dims_match_eager():
    x = rand(2, 5, 13, 7, seed=1)  # 91 a channel: 5 vectors and a tail
    x[1, 2, 3, 4] = x.max() + 1  # ties of the largest: the first wins
    x[0, 4, 12, 6] = x.max()
    check(per_channel, x, rtol=1e-5)
    check(per_channel, rand(3, 2, 1, 1, seed=2))  # windows of one element
    nan = rand(1, 3, 5, 3, seed=3)
    nan[0, 1, 2, 2] = nan[0, 2, 4, 0] = float("nan")
    check(per_channel, nan)


def test_integers_bfloat16_and_empty():
    a = torch.randint(-9, 9, (2, 3, 11, 5), generator=torch.Generator().manual_seed(4))
    check(lambda a: (a.sum([0, 2, 3]), a.amax([2, 3]), a.argmin()), a)
    check(
        lambda x: (x.sum([2, 3]), x.amax([1, 2, 3])),
        rand(2, 3, 11, 5, seed=5).bfloat16(),
        rtol=1e-2,
    )
    check(lambda x: (x.sum([1, 2]), x.amax([0, 2])), rand(2, 0, 3, seed=6))
