"""Element-wise kernels of few rows on more than one thread (schedules.py's _few_row_tasks): a
vector, or 3 long rows on 2 threads, run in parallel chunks of each row; against eager torch,
tails included (rows of a prime length)."""

import pytest

torch = pytest.importorskip("torch")

from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules import CHUNKED_ROWS_SOURCE  # noqa: E402
from tests.graph.test_lowering import compile_fn  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")


def chain(x, b):
    return torch.tanh(torch.erf(x) * torch.exp(-x) + torch.sin(x)) + b


@pytest.mark.parametrize(
    "shape, chunked", [((65537,), True), ((3, 30011), True), ((64, 1031), False), ((30011,), False)]
)
def test_few_long_rows_run_in_parallel_chunks(monkeypatch, shape, chunked):
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(shape, generator=g) * 3
    b = torch.randn(shape[-1], generator=g)  # broadcast along the rows
    compiled = compile_fn(chain, [x, b])
    (kernel,) = [st for st in compiled.steps if isinstance(st, BuiltKernel)]
    assert (kernel.source == CHUNKED_ROWS_SOURCE) == chunked
    parallel = kernel.module[kernel.module.entry_name].source.num_threads_symbol is not None
    assert parallel == (x.numel() >= 65536)  # (a short vector: one thread, as before)
    torch.testing.assert_close(compiled([x, b])[0], chain(x, b), rtol=2e-6, atol=2e-6)


def test_one_thread_keeps_the_first_guess(monkeypatch):
    monkeypatch.setenv("TF_NUM_THREADS", "1")
    x = torch.randn(65537, generator=torch.Generator().manual_seed(1))
    compiled = compile_fn(torch.erf, [x])
    (kernel,) = [st for st in compiled.steps if isinstance(st, BuiltKernel)]
    assert kernel.source != CHUNKED_ROWS_SOURCE
    torch.testing.assert_close(compiled([x])[0], torch.erf(x))
