"""addmv, addbmm, _trilinear (nn.Bilinear) and masked_scatter (graph/product_decompositions.py) against eager torch: run
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


def test_bilinear_layers_compile_as_one_reduction():
    # aten._trilinear (nn.Bilinear's) had no lowering: it ran eagerly
    x1, x2, w, b = rand(5, 7, seed=10), rand(5, 3, seed=11), rand(4, 7, 3, seed=12), rand(4)
    check(lambda x1, x2, w, b: torch.nn.functional.bilinear(x1, x2, w, b), x1, x2, w, b)
    check(lambda x1, x2, w: torch.nn.functional.bilinear(x1, x2, w), x1, x2, w)  # no bias
    y1, y2 = rand(2, 3, 7, seed=13), rand(2, 3, 3, seed=14)  # leading dims flattened
    check(lambda x1, x2, w: torch.nn.functional.bilinear(x1, x2, w), y1, y2, w)


def test_bilinear_gradients_match_eager():
    from torch import nn

    from tensorforge.graph import backend

    torch.manual_seed(3)
    layer = nn.Bilinear(6, 5, 3)
    eager = nn.Bilinear(6, 5, 3)
    eager.load_state_dict(layer.state_dict())
    x1, x2 = torch.randn(4, 6, requires_grad=True), torch.randn(4, 5)
    e1 = x1.detach().clone().requires_grad_(True)
    torch._dynamo.reset()
    out = torch.compile(layer, backend=backend)(x1, x2)
    (out * torch.arange(3.0)).sum().backward()
    (eager(e1, x2) * torch.arange(3.0)).sum().backward()
    torch.testing.assert_close(x1.grad, e1.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.weight.grad, eager.weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(layer.bias.grad, eager.bias.grad, rtol=1e-5, atol=1e-5)
