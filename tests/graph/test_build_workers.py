"""Kernels built by forked workers (runtime/build_workers.py): the serial build's results, its
errors raised here, and nothing left behind (processes, threads) after an error or Ctrl-C."""

import os
import signal
import sys
import threading
import time

import pytest
import torch

from tensorforge.runtime import build_workers

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="workers are forked on Linux alone"
)


def _threads() -> set:
    return {t.name for t in threading.enumerate()}


@pytest.fixture
def forks(monkeypatch):
    """The workers' process ids, as they are forked."""
    pids, fork = [], os.fork

    def recorded():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", recorded)
    return pids


def _gone(pids) -> bool:
    """Every worker has ended and been reaped (no zombie left)."""
    for pid in pids:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            pass
    return True


def _slow_here(j):  # this process's own kernels take a while: the worker takes its share
    time.sleep(0.03)
    return ("here", j * j)


def test_results_equal_the_serial_build_in_order(forks):
    finished = []

    def finish(j, generated):
        finished.append(j)
        return ("worker", generated)

    done = []
    results = build_workers.build_all(
        12, _slow_here, lambda j: j * j, finish, lambda: done.append(1), workers=2
    )
    assert [r[1] for r in results] == [j * j for j in range(12)]
    assert finished, "the worker built none"
    assert sorted(finished) == [j for j, r in enumerate(results) if r[0] == "worker"]
    assert len(done) == 12
    assert "tensorforge-build-results" not in _threads()
    assert forks and _gone(forks)


def test_one_job_or_one_process_builds_here_alone():
    def generate(j):
        raise AssertionError("no worker should run")

    assert build_workers.build_all(5, lambda j: j, generate, None, workers=1) == list(range(5))
    assert build_workers.build_all(1, lambda j: j, generate, None, workers=4) == [0]


def test_a_workers_error_is_raised_here_as_the_serial_build_raises_it(forks):
    def build(j):
        time.sleep(0.03)
        if j == 7:
            raise ValueError("kernel 7 cannot be scheduled")
        return j

    def generate(j):
        if j == 7:
            raise ValueError("kernel 7 cannot be scheduled")
        return j

    with pytest.raises(ValueError, match="kernel 7"):
        build_workers.build_all(10, build, generate, lambda j, g: g, workers=2)
    assert "tensorforge-build-results" not in _threads()
    assert forks and _gone(forks)


def test_a_kernel_only_a_worker_fails_on_is_built_here():
    def generate(j):
        if j % 2:
            raise RuntimeError("a worker's trouble")
        return j

    results = build_workers.build_all(
        9, _slow_here, generate, lambda j, g: ("worker", g * g), workers=2
    )
    assert [r[1] for r in results] == [j * j for j in range(9)]


def test_a_worker_killed_by_ctrl_c_or_dying_loses_nothing(forks):
    def generate(j):
        if j == 3:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the worker: it is gone
            time.sleep(5)
        return j

    results = build_workers.build_all(
        8, _slow_here, generate, lambda j, g: ("worker", g * g), workers=2
    )
    assert [r[1] for r in results] == [j * j for j in range(8)]
    assert forks and _gone(forks)


def test_ctrl_c_here_stops_the_workers_and_leaves_nothing(forks):
    def build(j):
        time.sleep(0.03)
        raise KeyboardInterrupt

    def generate(j):
        time.sleep(10)  # still working when this process stops: killed, not waited for
        return j

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        build_workers.build_all(6, build, generate, lambda j, g: g, workers=2)
    assert time.monotonic() - start < 5
    assert "tensorforge-build-results" not in _threads()
    assert forks and _gone(forks)


def test_a_models_kernels_are_the_same_built_in_parallel(monkeypatch):
    """Every distinct kernel's code, and the outputs, equal the serial build's."""
    from tensorforge.graph.backend import backend
    from tensorforge.runtime import cache

    monkeypatch.setenv("TENSORFORGE_CACHE", "0")
    sources = {}

    def record(source, target):
        key = cache_key(source, target)
        sources.setdefault(os.environ["TENSORFORGE_BUILD_JOBS"], set()).add(key)
        return key

    cache_key = cache.cache_key
    monkeypatch.setattr(cache, "cache_key", record)

    def f(x, w):
        y = torch.relu(x @ w) + 1.5
        z = torch.softmax(y, dim=-1) * torch.sigmoid(x[:, :5])
        return z.sum(0), torch.tanh(y).amax(1)

    x, w = torch.randn(7, 11), torch.randn(11, 5)
    outputs = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("TENSORFORGE_BUILD_JOBS", jobs)
        cache.EXECUTABLES.clear()
        torch._dynamo.reset()
        outputs[jobs] = torch.compile(f, backend=backend)(x, w)
    assert len(sources["1"]) >= build_workers.MIN_JOBS
    assert sources["1"] == sources["2"]
    for a, b in zip(outputs["1"], outputs["2"]):
        assert torch.equal(a, b)
    expected = f(x, w)
    for a, b in zip(outputs["2"], expected):
        torch.testing.assert_close(a, b)


def test_a_workers_slow_job_is_done_here_rather_than_waited_for(forks):
    def generate(j):
        if j == 1:
            time.sleep(10)  # (a kernel given little of a loaded machine)
        return j

    start = time.monotonic()
    results = build_workers.build_all(
        4, _slow_here, generate, lambda j, g: ("worker", g * g), workers=2
    )
    assert time.monotonic() - start < 5
    assert [r[1] for r in results] == [j * j for j in range(4)]
    assert _gone(forks)


def test_a_workers_warnings_are_raised_here(forks):
    import warnings

    def build(j):
        time.sleep(0.03)
        warnings.warn(f"kernel {j} is odd", UserWarning, stacklevel=1)
        return j

    def generate(j):
        warnings.warn(f"kernel {j} is odd", UserWarning, stacklevel=1)
        return j

    with pytest.warns(UserWarning) as caught:
        results = build_workers.build_all(6, build, generate, lambda j, g: g, workers=2)
    assert results == list(range(6))
    assert {str(w.message) for w in caught} == {f"kernel {j} is odd" for j in range(6)}


def test_a_librarys_object_code_is_the_same_made_in_parallel(monkeypatch):
    import tensorforge as tf
    from tensorforge import te
    from tensorforge.runtime import shared_lib

    def kernel(fn):
        a = te.placeholder((37,), name="a")
        return a, te.compute((37,), lambda i: fn(a[i]), name="b")

    functions = []
    for k, fn in enumerate([lambda x: x + 1.0, lambda x: x * x, lambda x: te.exp(x) - 2.0]):
        a, b = kernel(fn)
        module = tf.build(te.create_schedule(b.op), [a, b], target="llvm", name=f"f{k}")
        function = module[module.entry_name]
        functions.append((function.source, function.executable.get_source("ll")))
    emitted = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("TENSORFORGE_BUILD_JOBS", jobs)
        emitted[jobs] = shared_lib._emit_objects(functions, "llvm", True)
    assert emitted["1"] == emitted["2"]
    assert [symbols["f0"] for _, symbols in emitted["1"][:1]] == ["f0"]
