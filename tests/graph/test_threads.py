"""The compiled graph's CPU thread count follows torch's (torch.set_num_threads), as eager
torch's and Inductor's do; TF_NUM_THREADS overrides it."""

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
