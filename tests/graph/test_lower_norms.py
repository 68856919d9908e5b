"""Vector norms of every order, cdist, any / all and the diagonal and unfold views as kernels
(they ran eagerly), against eager torch: zeros, NaN, keepdim, several dims, dtype=, batched
and broadcast cdist, empty reductions, negative dims and offsets, run-time sizes."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, rand  # noqa: E402

ORDS = [2, 1, 3, 0.5, 0, float("inf"), float("-inf"), -1.5]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def norms(x):
    vn = torch.linalg.vector_norm
    return (
        *[vn(x, p, 1) for p in ORDS], vn(x, 3, (0, 2), keepdim=True), vn(x, 0.5),
        vn(x, 2, -1, dtype=torch.float64), x.norm(p=1, dim=0),
    )  # fmt: skip


def test_vector_norms_of_every_order():
    x = rand(3, 7, 5, seed=1)
    x[0, 2, :] = 0  # zeros: count 0, negative orders' inf -> 0
    check(norms, x, rtol=3e-5)
    check_bfloat16(
        lambda x: (torch.linalg.vector_norm(x, 3, 1), x.norm(p=float("inf"))), x.bfloat16()
    )


def distances(a, b, c):
    return (
        *[torch.cdist(a, b, p) for p in (2, 1, float("inf"), 0, 3.5)],
        torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), torch.cdist(c, b),
    )  # fmt: skip


def test_cdist_batched_and_broadcast():
    a, b, c = rand(2, 31, 3, seed=2), rand(2, 29, 3, seed=3), rand(4, 1, 7, 3, seed=4)
    check(distances, a, b, c, rtol=3e-5)


def booleans(x, m):
    return (
        m.any(1), m.all(0), m.any(), m.all(), x.any(-1, keepdim=True), x.all(1), m.any((0, 2)),
        x.to(torch.uint8).any(1),
        m[:, :0].any(1), m[:, :0].all(1),
    )  # fmt: skip


def test_any_all():
    x = rand(3, 6, 5, seed=5).round()  # zeros among them
    x[1, 2, 3] = float("nan")  # nonzero
    check(booleans, x, x > 0)


def views(x, y):
    return (
        torch.diagonal(x), torch.diagonal(x, 1, 0, 2) * 2, torch.diagonal(x, -2, -1, 1),
        torch.trace(x[0]), torch.diagonal(y, 5), x.unfold(1, 3, 2), x.unfold(-1, 2, 1) + 1,
        y.unfold(0, 1, 3), x.unfold(2, 5, 5),
    )  # fmt: skip


def test_diagonal_and_unfold():
    check(views, rand(4, 7, 5, seed=6), rand(3, 11, seed=7))


def run_time_sized(x, y):
    one_hot = torch.nn.functional.one_hot((x * 2).abs().long().clamp(max=4), 5)  # (any.dims)
    return (
        x.norm(p=3, dim=1),
        x.any(0),
        torch.diagonal(x),
        x.unfold(1, 2, 2),
        torch.cdist(x, y),
        one_hot,
    )


def test_run_time_sizes():
    fast, nothing_eager = dynamic(run_time_sized)
    for n in (5, 8):
        x, y = rand(n, 6, seed=n), rand(3, 6, seed=n + 1)
        for g, w in zip(fast(x, y), run_time_sized(x, y)):
            assert g.dtype == w.dtype and torch.allclose(
                g.double(), w.double(), rtol=1e-5, atol=1e-6
            )
    nothing_eager()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_norm_over_a_dimension_of_one_drops_it_on_the_gpu():
    # torch 2.11's fake tensor kept the reduced dimension of 1: the kernel's output was
    # (17, 1, 65, 1) where eager's is (17, 1, 65) (GPU fuzz seed 9188)
    from tensorforge.graph import backend

    x = torch.randn(17, 1, 65, 1, generator=torch.Generator().manual_seed(5)).cuda()

    def fn(x):
        return x.norm(dim=-1), torch.linalg.vector_norm(x, 3, (1, 3)), x.norm(dim=1, keepdim=True)

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, backend=backend)(x)
    for g, e in zip(got, fn(x)):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e)
