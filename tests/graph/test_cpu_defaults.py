"""CPU defaults that decide speed: the compiled graph's thread count follows torch's
(torch.set_num_threads), as eager torch's and Inductor's do, TF_NUM_THREADS overriding it; and a
big weight's transpose is folded at compile time, so its product reads packed panels."""

import pytest

torch = pytest.importorskip("torch")

import tensorforge.graph  # noqa: E402,F401  (the backend sets the default)
from tensorforge.runtime.native_call import num_threads  # noqa: E402


def test_parallel_loops_follow_torchs_thread_count(monkeypatch):
    monkeypatch.delenv("TF_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert num_threads() == 1
        torch.set_num_threads(3)
        assert num_threads() == 3
        monkeypatch.setenv("TF_NUM_THREADS", "2")
        assert num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_big_weights_transpose_folds_into_packed_panels():
    # 4200 x 1000 float32 (past the folding limit of 2^22 elements): its transpose folded at
    # any size, the product reads packed panels; unfolded it read the weight as a strided
    # gather (2.9 GB/s from memory, 8x slower than eager at 4096 x 4096)
    from tensorforge.graph import backend
    from tensorforge.graph.constant_folding import FOLD_MAX_ELEMENTS
    from tests.graph.test_dynamic_and_cuda import _find_compiled

    linear = torch.nn.Linear(4200, 1000).eval()
    assert linear.weight.numel() > FOLD_MAX_ELEMENTS
    x = torch.randn(1, 4200)
    compiled = []

    def counting(gm, example_inputs, **kwargs):
        compiled.append(backend(gm, example_inputs, **kwargs))
        return compiled[-1]

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(linear, backend=counting)(x)
    torch.testing.assert_close(got, linear(x), rtol=1e-4, atol=1e-4)
    program = _find_compiled(compiled[0]).program
    assert any(name.startswith("permute") or name.startswith("t") for name in program.folded)
    assert any(b.name.endswith("_packed") for b in program.constants), list(program.constants)
