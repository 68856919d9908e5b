"""addmv, addbmm and masked_scatter (graph/product_decompositions.py) against eager torch: run
as kernels (nothing eager under strict mode), with their scalars, broadcasts and edge masks."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def test_addmv_with_its_scalars():
    a, v, b = rand(13, 7, seed=1), rand(7, seed=2), rand(13, seed=3)
    check(lambda a, v, b: torch.addmv(b, a, v), a, v, b)
    check(lambda a, v, b: torch.addmv(b, a, v, beta=0.5, alpha=-2), a, v, b)
    check(lambda a, v, b: torch.addmv(b[:1], a, v), a, v, b)  # a broadcast input


def test_addbmm_sums_over_the_batch():
    b1, b2, m = rand(3, 5, 7, seed=4), rand(3, 7, 11, seed=5), rand(5, 11, seed=6)
    check(lambda m, x, y: torch.addbmm(m, x, y), m, b1, b2)
    check(lambda m, x, y: torch.addbmm(m, x, y, beta=0.25, alpha=3), m, b1, b2)
    nan = m.clone()
    nan[1, 2] = float("nan")  # beta=0 ignores the input, NaN included
    check(lambda m, x, y: torch.addbmm(m, x, y, beta=0), nan, b1, b2)
    check(lambda m, x, y: torch.addbmm(m[:1], x, y), m, b1, b2)  # a broadcast input


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
def test_masked_scatter_takes_the_source_in_order(dtype):
    x = (rand(6, 7, seed=7) * 10).to(dtype)
    source = (rand(50, seed=8) * 10).to(dtype)  # more elements than the mask needs
    row_mask = rand(1, 7, seed=9) > 0  # broadcast over the rows
    check(lambda x, m, s: x.masked_scatter(m, s), x, x > 0, source)
    check(lambda x, m, s: x.masked_scatter(m, s), x, row_mask, source)
    check(lambda x, m, s: x.masked_scatter(m, s), x, x > 1e9, source)  # nothing taken
    check(lambda x, m, s: x.masked_scatter(m, s) * 2, x, x == x, source)  # all taken
