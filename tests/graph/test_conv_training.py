"""Convolutions in training graphs (weights known only at run time): the forward convolution
with its weights packed into vectors along the filters as the step runs (lower_conv's
`_filter_vector_weights`), against eager torch's outputs and gradients."""

import copy
import functools

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tensorforge.graph import backend, lower_conv, lower_conv_backward  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a graph that fails raises
    torch._dynamo.reset()


@pytest.fixture
def packs(monkeypatch):
    """The weights each lowering packed at run time (their shapes)."""
    seen = []
    original = lower_conv._filter_vector_weights

    def spy(ctx, node, w, lanes):
        if not isinstance(w, torch.Tensor):
            seen.append(tuple(w.shape))
        return original(ctx, node, w, lanes)

    monkeypatch.setattr(lower_conv, "_filter_vector_weights", spy)
    return seen


def close(got, want, tol=1e-4):
    scale = want.abs().max().item() or 1.0
    return (got - want).abs().max().item() <= tol * scale


def assert_same_step(model, x, target=None):
    torch.manual_seed(3)
    eager = copy.deepcopy(model)
    be = backend if target is None else functools.partial(backend, options={"target": target})
    compiled = torch.compile(model, backend=be)
    got, want = compiled(x), eager(x)
    assert close(got, want)
    weights = torch.randn(want.shape)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, f"no gradient for {name}"
        assert close(p.grad, q.grad), f"gradient of {name}"


# (in, out channels, kernel, stride, padding, bias, batch, height, width): filters of whole
# vectors (16, 32), of part vectors (12: 4 lanes, 24: 8) and of none (5: the direct schedule)
CASES = [
    (3, 16, 3, 1, 1, True, 2, 9, 11),
    (7, 32, 3, 2, 1, False, 3, 13, 8),
    (5, 12, 3, 1, 0, True, 1, 7, 10),
    (16, 24, 1, 2, 0, False, 2, 9, 9),
    (6, 5, 3, 2, 1, True, 2, 8, 7),
]


@pytest.mark.parametrize("cin, cout, k, stride, pad, bias, n, h, w", CASES)
def test_conv_training_steps_match_eager(packs, cin, cout, k, stride, pad, bias, n, h, w):
    torch.manual_seed(cin * cout)
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=bias)
    model = nn.Sequential(conv, nn.ReLU())
    assert_same_step(model, torch.randn(n, cin, h, w, requires_grad=True))
    packed = (cout // 4 * 4 == cout) and (k, stride) != (1, 1)
    assert ((cout, cin, k, k) in packs) == packed


def test_packed_weights_on_avx2(packs):
    # 8-lane vectors: 24 filters are three of them
    torch.manual_seed(5)
    model = nn.Sequential(nn.Conv2d(5, 24, 3, stride=2, padding=1), nn.Tanh())
    assert_same_step(model, torch.randn(2, 5, 11, 9), target="llvm -mcpu=znver3")
    assert (24, 5, 3, 3) in packs


@pytest.fixture
def weight_gradients(monkeypatch):
    """The weight gradients lowered as products (their weights' shapes)."""
    seen = []
    original = lower_conv_backward._weight_gradient

    def spy(ctx, node, grad_out, x, w_shape, stride, padding):
        seen.append(tuple(w_shape))
        return original(ctx, node, grad_out, x, w_shape, stride, padding)

    monkeypatch.setattr(lower_conv_backward, "_weight_gradient", spy)
    return seen


@pytest.mark.parametrize("input_grad", [True, False])
def test_weight_gradients_as_products_match_eager(weight_gradients, input_grad):
    # few output pixels (a late ResNet stage's): the weights' gradient is ours, the input's
    # and bias's run eagerly in one step (or none, where neither is wanted); odd channels,
    # stride 2 and padding 1, batch 3, no bias; and padding 0, stride 1, bias
    torch.manual_seed(7)
    model = nn.Sequential(
        nn.Conv2d(5, 7, 3, stride=2, padding=1, bias=False),
        nn.ReLU(),
        nn.Conv2d(7, 6, 3, padding=0),
    )
    x = torch.randn(3, 5, 11, 9, requires_grad=input_grad)
    assert_same_step(model, x)
    assert sorted(weight_gradients) == [(6, 7, 3, 3), (7, 5, 3, 3)]
