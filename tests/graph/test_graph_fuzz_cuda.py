"""The graph fuzzer's programs run on a CUDA GPU (graph_fuzz_cuda.py), fixed seeds; and, here
too, the rewrite that puts the tensors a program makes itself on the GPU."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph import graph_fuzz, graph_fuzz_cuda  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402

SEEDS = range(24)


def test_index_lists_a_program_makes_are_made_on_the_gpu():
    sources = (graph_fuzz.generate(seed).source() for seed in range(400))
    source = next(s for s in sources if "torch.tensor(" in s)
    rewritten = graph_fuzz_cuda._on_gpu(source)
    assert "torch.tensor(" not in rewritten and "_gpu_tensor(" in rewritten


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_programs_on_the_gpu_match_eager(seed):
    kind, detail = graph_fuzz_cuda.check(seed)
    assert kind in ("ok", "skip", "suspect"), f"{kind}: {detail}"
