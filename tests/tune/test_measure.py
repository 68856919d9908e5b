"""Fault-isolated measurement: every misbehaving candidate is recorded and the search goes on."""

import signal
import time

import pytest
from tune_fakes import fake_option, fake_reference

from tensorforge import tune
from tensorforge.tune.measure import MeasureErrorNo, Measurer


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
    measurer = Measurer(task, fake_option(timeout=2.0, n_parallel=2))
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
    assert elapsed < 20  # two timeouts of 2 s, the rest quick


def test_tuning_goes_on_past_failures(tmp_path):
    task = tune.create_task("test/fake_copy", (2, True))  # 2 * 3 tilings * 8 modes
    log = tmp_path / "faults.jsonl"
    tuner = tune.RandomTuner(task, seed=4)
    tuner.tune(16, fake_option(timeout=1.5), callbacks=[tune.log_to_file(log)])
    records = tune.load_records(log)
    assert len(records) == 16  # every trial logged, failures included
    kinds = {r.result.error_no for r in records}
    assert MeasureErrorNo.NO_ERROR in kinds and len(kinds) >= 4, kinds
    assert tuner.best_config is not None and tuner.best_result.ok


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

    out = fork_map(work, range(8), n_workers=2, timeout=2.0)
    assert [o for o in out if not isinstance(o, Failure)] == [0, 1, 9, 36, 49]
    assert out[2].kind == "crash" and signal.Signals.SIGSEGV.name in out[2].message
    assert out[4].kind == "timeout"
    assert out[5].kind == "error" and "five" in out[5].message
    assert call_in_child(lambda: 42, timeout=10) == 42


def test_forkserver_children_find_the_template():
    """CUDA candidates start from a clean server process (this one may have initialized CUDA);
    the template travels by name and is found there."""
    task = tune.create_task("test/fake_copy", (16, True))
    measurer = Measurer(task, fake_option(timeout=5.0), method="forkserver")
    results = measurer.measure(
        [_config(task, "ok"), _config(task, "raise"), _config(task, "run_segv")]
    )
    assert [r.error_no for r in results] == [
        MeasureErrorNo.NO_ERROR,
        MeasureErrorNo.INSTANTIATION_ERROR,
        MeasureErrorNo.CRASH,
    ], [r.error_msg for r in results]
