"""Common model blocks (zoo_models.py) end to end through torch.compile(backend=tensorforge),
against eager torch on random data at small and odd sizes (batch 1 and 3, sequence 7 and 129,
15 x 17 images): compiled whole, with no node run eagerly (strict: a lowering bug fails)."""

import re

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph import backend  # noqa: E402
from tests.graph import zoo_models as zoo  # noqa: E402


def relative_error(got, expected) -> float:
    return ((got - expected).abs().max() / expected.abs().max()).item()


def compile_and_compare(model, *args, tolerance=1e-4):
    """The compiled model's output against eager's, and the fallbacks its report lists."""
    torch.manual_seed(0)
    model = zoo.randomize_norms(model).eval()
    with torch.no_grad():
        torch._dynamo.reset()
        fast = torch.compile(model, backend=backend, options={"report": True})
        got, expected = fast(*args), model(*args)
    assert relative_error(got, expected) < tolerance


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")


def fallbacks(report: str) -> list[str]:
    return re.findall(r"EAGER (\S+)", report)


def test_mobilenet_v2_blocks(strict, capsys):
    compile_and_compare(zoo.MobileNetV2Blocks(8), torch.randn(1, 8, 15, 17))
    assert fallbacks(capsys.readouterr().err) == []


@pytest.mark.parametrize(
    "batch, seq, approximate, mask",
    [(3, 7, "none", None), (1, 129, "tanh", "additive"), (3, 7, "none", "boolean")],
)
def test_encoder_block_with_sdpa(batch, seq, approximate, mask, strict, capsys):
    torch.manual_seed(seq)
    x = torch.randn(batch, seq, 32)
    args = (x,)
    if mask == "additive":
        args += (torch.randn(batch, 1, seq, seq),)
    elif mask == "boolean":
        args += (torch.rand(batch, 1, seq, seq) > 0.3,)
    compile_and_compare(zoo.EncoderBlock(32, 4, approximate), *args)
    assert fallbacks(capsys.readouterr().err) == []


@pytest.mark.parametrize("batch, seq", [(3, 7), (1, 129)])
def test_llama_block(batch, seq, strict, capsys):
    torch.manual_seed(seq)
    compile_and_compare(zoo.LlamaBlock(32, 4, 88), torch.randn(batch, seq, 32))
    report = capsys.readouterr().err
    assert fallbacks(report) == []
    assert re.search(r"computed at compile time: .*\bcos\b.*\bsin\b", report)  # rotary tables


def test_unet_block(strict, capsys):
    x, skip = torch.randn(1, 8, 15, 17), torch.randn(1, 8, 30, 34)
    compile_and_compare(zoo.UNetBlock(8, 4), x, skip)
    assert fallbacks(capsys.readouterr().err) == []


def test_embedding_classifier(strict, capsys):
    compile_and_compare(zoo.EmbeddingClassifier(), torch.randint(0, 101, (3, 129)))
    report = capsys.readouterr().err
    assert fallbacks(report) == []
    # the layer norm of gathered rows keeps the rules' row schedule (the first guess's is 3x slower)
    (line,) = [x for x in report.splitlines() if "native_layer_norm" in x]
    assert "row operator" in line and "embedding" in line, line


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_classifier_runs(kind):
    # Dynamo runs nn.LSTM / nn.GRU itself (no graph reaches tensorforge): it must just work
    compile_and_compare(zoo.RecurrentClassifier(kind=kind), torch.randn(3, 7, 16))
