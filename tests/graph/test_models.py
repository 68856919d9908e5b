"""Small models end to end through torch.compile(backend=tensorforge), against eager torch."""

import re

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import backend  # noqa: E402
from tests.graph.models import MLP, Block, SmallCNN, randomize_batch_norms  # noqa: E402


def relative_error(got, expected) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


def compiled_and_eager(model, x, **options):
    torch.manual_seed(0)
    model = model.eval()
    with torch.no_grad():
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend, options=options or None)
        return fast, fast(x), model(x)


def test_mlp_matches_eager():
    torch.manual_seed(0)
    fast, got, expected = compiled_and_eager(MLP(), torch.randn(5, 37))
    assert relative_error(got, expected) < 1e-5


def test_small_cnn_with_batch_norm_matches_eager():
    torch.manual_seed(0)
    model = randomize_batch_norms(SmallCNN())
    fast, got, expected = compiled_and_eager(model, torch.randn(2, 3, 15, 13))
    assert relative_error(got, expected) < 1e-5


def test_transformer_block_matches_eager():
    torch.manual_seed(0)
    fast, got, expected = compiled_and_eager(Block(), torch.randn(2, 7, 32))
    assert relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("seq", [1, 7, 129])
def test_transformer_block_at_odd_sequence_lengths(seq, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # compiled, not run eagerly (seq 1 was)
    torch.manual_seed(seq)
    fast, got, expected = compiled_and_eager(Block(d=32, heads=4), torch.randn(1, seq, 32))
    assert relative_error(got, expected) < 1e-5


def test_a_right_matrix_with_contiguous_rows_is_read_in_place(capsys):
    # attention's att @ V, V a head-split view of the qkv projection: the product reads V where
    # it lies (one kernel); K^T (rows strided) is still copied first (two kernels)
    class AttV(torch.nn.Module):
        def __init__(self, transposed: bool):
            super().__init__()
            self.transposed = transposed

        def forward(self, att, qkv):
            v = qkv[..., 30:].reshape(2, 11, 3, 5).transpose(1, 2)  # [2, 3, 11, 5]
            return att @ (v.transpose(-2, -1) if self.transposed else v)

    qkv = torch.randn(2, 11, 45)
    for transposed, kernels in ((False, 1), (True, 2)):
        a = torch.randn(2, 3, 7, 5) if transposed else torch.randn(2, 3, 11, 11)
        model = AttV(transposed).eval()
        with torch.no_grad():
            torch._dynamo.reset()
            fast = torch.compile(model, backend=backend, options={"report": True})
            got, expected = fast(a, qkv), model(a, qkv)
        assert relative_error(got, expected) < 1e-5
        report = capsys.readouterr().err
        assert len(re.findall(r"^  k\d+_", report, flags=re.M)) == kernels, report


def test_an_unsupported_operator_runs_eagerly_inside_the_graph(capsys):
    class WithSine(torch.nn.Module):
        def forward(self, x):
            return torch.polygamma(2, torch.sin(x * 2.0) + 2.0) + 1.0

    x = torch.randn(3, 11)
    fast, got, expected = compiled_and_eager(WithSine(), x, report=True)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5)
    report = capsys.readouterr().err
    assert "EAGER aten.polygamma" in report and "EAGER aten.sin" not in report  # (sin: a kernel)


def test_the_backend_is_registered_by_name():
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="torch_dynamo_backends")]
    if "tensorforge" not in names:
        pytest.skip("tensorforge is not installed (pip install -e .): no entry point to find")
    torch.manual_seed(0)
    model, x = MLP().eval(), torch.randn(2, 37)
    with torch.no_grad():
        torch._dynamo.reset()
        got = torch.compile(model, backend="tensorforge", options={"target": "llvm"})(x)
        assert relative_error(got, model(x)) < 1e-5
