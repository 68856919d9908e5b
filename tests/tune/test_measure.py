"""Fault-isolated measurement: every misbehaving candidate is recorded and the search goes on."""

import signal
import time

import pytest

from tensorforge import tune
from tensorforge.tune.measure import MeasureErrorNo, Measurer

from tests.tune.fakes import fake_option, fake_reference


def _config(task, mode):
    space = task.config_space
    choices = [0] * len(space.dims)
    choices[-1] = space.space_map["mode"].values.index(mode)
    return space.get(space.index_of(choices))


MODES = {
    "ok": MeasureErrorNo.NO_ERROR,
    "raise": MeasureErrorNo.INSTANTIATION_ERROR,
    "segv": MeasureErrorNo.CRASH,
    "hang": MeasureErrorNo.BUILD_TIMEOUT,
    "run_segv": MeasureErrorNo.CRASH,
    "run_hang": MeasureErrorNo.RUN_TIMEOUT,
    "run_raise": MeasureErrorNo.RUNTIME_ERROR,
    "wrong": MeasureErrorNo.WRONG_ANSWER,
}


def test_each_failure_is_recorded_and_the_batch_completes():
    task = tune.create_task("test/fake_copy", (16, True))
    measurer = Measurer(task, fake_option(timeout=1.0, n_parallel=2))
    measurer._reference = fake_reference(task)  # check_correctness without a compiler
    configs = [_config(task, mode) for mode in MODES]
    reported = []
    start = time.monotonic()
    results = measurer.measure(configs, lambda position, result: reported.append(position))
    elapsed = time.monotonic() - start
    assert sorted(reported) == list(range(len(MODES)))
    for mode, result in zip(MODES, results):
        assert result.error_no == MODES[mode], (mode, result.error_msg)
        assert result.ok == (mode == "ok")
    by_mode = dict(zip(MODES, results))
    assert "SIGSEGV" in by_mode["segv"].error_msg and "building" in by_mode["segv"].error_msg
    assert "SIGSEGV" in by_mode["run_segv"].error_msg and "running" in by_mode["run_segv"].error_msg
    assert "cannot be scheduled" in by_mode["raise"].error_msg
    assert "kernel launch failed" in by_mode["run_raise"].error_msg
    assert "differs from the default" in by_mode["wrong"].error_msg
    assert by_mode["ok"].costs and by_mode["ok"].cost > 0
    assert elapsed < 8  # two timeouts of 1 s, the rest quick


def test_tuning_goes_on_past_failures(tmp_path):
    task = tune.create_task("test/fake_copy", (16, True))
    log = tmp_path / "faults.jsonl"
    tuner = tune.GridSearchTuner(task)
    # grid order: all tilings with mode "ok" come first, so start from the faulty ones
    space = task.config_space
    per_mode = len(space) // len(space.space_map["mode"])
    tuner.counter = per_mode  # mode "raise" onwards
    tuner.visited.update(range(per_mode + 6, per_mode * 8))  # a few of each would be slow: keep 6
    tuner.tune(6, fake_option(timeout=1.0), callbacks=[tune.log_to_file(log)])
    records = tune.load_records(log)
    assert len(records) == 6
    assert all(r.result.error_no == MeasureErrorNo.INSTANTIATION_ERROR for r in records)


def test_measure_option_validates():
    with pytest.raises(ValueError):
        tune.measure_option(timeout=0)
    with pytest.raises(ValueError):
        tune.measure_option(number=0)
    option = tune.measure_option()
    assert option.n_parallel >= 1 and option.number == 5 and option.repeat == 3


def test_workers_report_signals():
    from tensorforge.tune.workers import Failure, call_in_child, fork_map

    def work(x):
        if x == 2:
            import ctypes

            ctypes.string_at(0)
        if x == 4:
            time.sleep(60)
        if x == 5:
            raise KeyError("five")
        return x * x

    out = fork_map(work, range(8), n_workers=2, timeout=1.0)
    assert [o for o in out if not isinstance(o, Failure)] == [0, 1, 9, 36, 49]
    assert out[2].kind == "crash" and signal.Signals.SIGSEGV.name in out[2].message
    assert out[4].kind == "timeout"
    assert out[5].kind == "error" and "five" in out[5].message
    assert call_in_child(lambda: 42, timeout=10) == 42
