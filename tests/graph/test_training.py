"""Graphs that need gradients (graph/training.py): a training step through torch.compile's
forward and backward graphs, against eager torch on the same weights and data."""

import copy

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tensorforge.errors import ArgumentError  # noqa: E402
from tensorforge.graph import backend  # noqa: E402


def twins(make, seed=0):
    torch.manual_seed(seed)
    model = make()
    return model, copy.deepcopy(model)


def close(got, want, tol=1e-4):
    scale = want.abs().max().item() or 1.0
    return (got - want).abs().max().item() <= tol * scale


def assert_same_step(compiled, model, eager, *inputs, tol=1e-4):
    """One forward + backward of each: outputs, gradients and buffers (running statistics).
    The loss weighs the outputs at random (a normalized output's mean square has no gradient)."""
    out_got, out_want = compiled(*inputs), eager(*inputs)
    assert close(out_got, out_want, tol)
    weights = torch.randn(out_want.shape, device=out_want.device, dtype=out_want.dtype)
    (out_got * weights).sum().backward()
    (out_want * weights).sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None, f"no gradient for {name}"
        assert close(p.grad, q.grad, tol), f"gradient of {name}"
    for (name, b), c in zip(model.named_buffers(), eager.buffers()):
        assert close(b.float(), c.float(), tol), f"buffer {name}"


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a graph that fails raises
    torch._dynamo.reset()


def test_mlp_training_steps_match_eager_and_see_the_updated_weights():
    def make():
        return nn.Sequential(nn.Linear(13, 31), nn.GELU(), nn.LayerNorm(31), nn.Linear(31, 3))

    model, eager = twins(make)
    compiled = torch.compile(model, backend=backend)
    opt_a = torch.optim.SGD(model.parameters(), lr=0.5)
    opt_b = torch.optim.SGD(eager.parameters(), lr=0.5)
    for _ in range(3):  # nothing is frozen: each step reads the weights the last one wrote
        x = torch.randn(7, 13)
        opt_a.zero_grad(), opt_b.zero_grad()
        assert_same_step(compiled, model, eager, x)
        opt_a.step(), opt_b.step()


def test_conv_batch_norm_in_training_mode_updates_running_statistics():
    def make():
        return nn.Sequential(
            nn.Conv2d(3, 6, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.Conv2d(6, 5, 1, groups=1),
            nn.GroupNorm(1, 5),  # (per-channel groups would make the pooled output ~0)
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    model, eager = twins(make, seed=1)
    compiled = torch.compile(model.train(), backend=backend)
    eager.train()
    assert_same_step(compiled, model, eager, torch.randn(2, 3, 11, 7))


def test_max_pools_route_gradients_to_eager_positions():
    """The pools' indices (computed by the forward graph, read by the backward's eager
    max_pool2d_with_indices_backward): padding, stride 2, a ceil_mode last window past the
    input's end, odd sizes, and ties among the ReLU's zeros (the first in the window wins)."""

    def make():
        return nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1),
            nn.MaxPool2d(2, stride=2, ceil_mode=True),
            nn.Flatten(),
            nn.Linear(4 * 4 * 3, 5),
        )

    model, eager = twins(make, seed=2)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 3, 13, 9)
    x_got, x_want = x.clone().requires_grad_(), x.clone().requires_grad_()
    assert_same_step(compiled, model, eager, x_got)
    eager(x_want).backward(torch.ones(2, 5))  # the input's gradient, alone
    x_got.grad = None
    compiled(x_got).backward(torch.ones(2, 5))
    assert close(x_got.grad, x_want.grad)


def test_transformer_layer_gradients_match_eager():
    def make():
        return nn.TransformerEncoderLayer(16, 4, 24, batch_first=True, dropout=0.0)

    model, eager = twins(make, seed=2)
    compiled = torch.compile(model, backend=backend)
    assert_same_step(compiled, model, eager, torch.randn(2, 5, 16))


def test_embedding_and_input_gradients():
    model, eager = twins(lambda: nn.Sequential(nn.Embedding(11, 6), nn.Linear(6, 4)), seed=3)
    ids = torch.randint(0, 11, (3, 5))
    compiled = torch.compile(model, backend=backend)
    assert_same_step(compiled, model, eager, ids)

    x = torch.randn(4, 9, requires_grad=True)  # a gradient for an input, no parameters
    y = x.detach().clone().requires_grad_()
    fn = torch.compile(lambda v: (v.sin() * v).cumsum(1), backend=backend)
    fn(x).pow(2).sum().backward()
    (y.sin() * y).cumsum(1).pow(2).sum().backward()
    assert close(x.grad, y.grad)


def test_an_eval_model_called_without_no_grad_is_compiled(capsys):
    model, eager = twins(lambda: nn.Sequential(nn.Linear(8, 8), nn.Tanh()).eval(), seed=4)
    x = torch.randn(3, 8)
    got = torch.compile(model, backend=backend, options={"report": True})(x)
    assert "kernels of this graph" in capsys.readouterr().err  # not eager with a warning
    assert close(got, eager(x))
    assert got.requires_grad


@pytest.mark.parametrize("rows", [5, 389])
def test_products_with_a_transposed_right_matrix_known_at_run_time(rows, capsys):
    # addmm(b, x, W^T) with W an input: under PACK_MIN_ROWS rows eager torch's product, past it
    # W packed into panels by a kernel of its own; 53 columns: a partial last panel
    torch.manual_seed(rows)
    x, w, b = torch.randn(rows, 97), torch.randn(53, 97), torch.randn(53)
    fn = lambda x, w, b: torch.addmm(b, x, w.t()).relu()  # noqa: E731
    with torch.no_grad():
        got = torch.compile(fn, backend=backend, options={"report": True})(x, w, b)
    report = capsys.readouterr().err
    assert close(got, torch.addmm(b, x, w.t()).relu(), 1e-5)
    if rows < 384:
        assert "EAGER aten.addmm" in report
    else:
        assert "_panels" in report and "EAGER" not in report


@pytest.mark.cuda
@pytest.mark.parametrize(
    "make, shape",
    [
        # (a conv bias before a training batch norm has no gradient: left out)
        (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                               nn.Conv2d(8, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU()),
         (4, 3, 17, 19)),
        (lambda: nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0),
         (2, 11, 32)),
        (lambda: nn.Sequential(nn.Linear(37, 101), nn.GELU(), nn.LayerNorm(101),
                               nn.Linear(101, 5)), (13, 37)),
    ],
)  # fmt: skip
def test_gpu_training_steps_match_eager(make, shape):
    # batch norm's per-channel sums take a block per channel (a thread per channel summed
    # 4 x 17 x 19 terms one after another: float32 error grew with it)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    model, eager = twins(make, seed=7)
    model, eager = model.cuda(), eager.cuda()
    compiled = torch.compile(model, backend=backend)
    for _ in range(2):  # the second step: the graphs' second calls (their arenas reused)
        model.zero_grad(), eager.zero_grad()
        assert_same_step(compiled, model, eager, torch.randn(shape, device="cuda"), tol=2e-4)


@pytest.mark.cuda
def test_gpu_training_with_attention_dropout_runs():
    # the philox seed and offset of CUDA attention's dropout are CPU scalars its backward reads
    # on the host: moved to the GPU as a kernel's input, the backward segfaulted
    torch.manual_seed(3)
    model = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.1).cuda()
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(2, 11, 32, device="cuda", requires_grad=True)
    compiled(x).square().mean().backward()
    torch.cuda.synchronize()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_cuda_products_over_a_run_time_size_generate_code():
    # under dynamic shapes a weight's gradient sums over a run-time size (the batch): the CUDA
    # product schedules read that extent as a constant (AttributeError); here the backward's
    # product alone, compiled for CUDA (code generation only: no GPU needed), and the call
    # names the CPU tensor
    fn = torch.compile(
        lambda g, x: g.t() @ x, backend=backend, dynamic=True, options={"target": "cuda"}
    )
    with torch.no_grad(), pytest.raises(ArgumentError, match="called with a tensor on cpu"):
        fn(torch.randn(6, 40), torch.randn(6, 24))
