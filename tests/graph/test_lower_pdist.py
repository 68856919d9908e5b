"""F.pdist (aten._pdist_forward) as a CPU kernel against eager torch: p = 2, 1, 0, inf and
another, a NaN, equal rows, a row count past a block of pairs and not a multiple of it, float64;
many columns with p not 1 or 2 run eagerly."""

import math

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import registry  # noqa: E402
from tensorforge.graph.registry import EAGER_ON_CPU  # noqa: E402
from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def test_pdist(monkeypatch):
    monkeypatch.setattr(registry, "EAGER_ON_CPU", {})
    x = rand(37, 5, seed=1)  # 37: blocks of 16 pairs and tails
    x[3] = x[9]  # a distance of 0
    x[20, 2] = float("nan")

    def fn(x):
        return tuple(F.pdist(x, p) for p in (2.0, 1.0, 0.0, math.inf, 2.5))

    check(fn, x, rtol=1e-4)
    check(lambda x: (F.pdist(x),), rand(2, 3, seed=2).double())  # one pair


def test_many_columns_run_eagerly_where_eager_wins(monkeypatch):
    monkeypatch.setattr(registry, "EAGER_ON_CPU", EAGER_ON_CPU)
    x = rand(5, 40, seed=3)
    compiled = check(lambda x: (F.pdist(x, 3.0), F.pdist(x, 1.0)), x, fallbacks=1, rtol=1e-4)
    assert "of many columns" in compiled.program.fallbacks[0][-1]
