"""Lowering the shortlist in the measurement processes (tune.auto.screening): the same search
as lowering it in the tuner's process, a candidate that fails to lower ends alone, and Ctrl-C
while screening leaves a resumable log and no process behind."""

import json
import multiprocessing
import os

import numpy as np
from test_auto_search import SMALL, _task, synthetic_seconds

from tensorforge import tune
from tensorforge.tune.auto import screening, tuning

# lowers and ranks by IR from the start
COLD = {**SMALL, "first_guess": False, "lower_shortlist": True}


def _indices(tuner):
    return [t.index for t, _ in tuner.search.history]


def test_workers_and_parent_lowering_give_the_same_search():
    task = _task()
    workers = task.tune(24, seed=11, **COLD)
    parent = task.tune(24, seed=11, lower_in_workers=False, **COLD)
    assert _indices(workers) == _indices(parent) and len(_indices(workers)) == 24
    assert workers.best_cost == parent.best_cost
    assert workers.search.ir_seen == parent.search.ir_seen
    shared = set(workers.search.ir_features) & set(parent.search.ir_features)
    assert len(shared) >= 24
    for index in shared:
        assert (workers.search.ir_features[index] == parent.search.ir_features[index]).all()


def test_screened_candidates_build_from_their_own_lowering():
    """The default builder compiles what screening lowered; its report (hash, features) comes
    back with the measurement, and the kernel is timed as usual."""
    task = _task()
    option = tune.measure_option(number=1, repeat=1, n_parallel=2, timeout=60)
    measurer = screening.ScreeningMeasurer(task, option, screening.build_report)
    search = tuning.EvolutionarySearch(task, seed=0, first_guess=False)
    configs = search.random_batch(3, set())
    try:
        reports = measurer.screen(configs)
        assert all(reports[c.index] is not None for c in configs)
        results = measurer.measure(configs[:2])
    finally:
        measurer.close()
    assert all(r.ok and min(r.costs) > 0 for r in results)
    for c in configs[:2]:
        digest, feats = measurer.features[c.index]
        assert digest == reports[c.index][0] and np.array_equal(feats, reports[c.index][1])
    assert measurer.n_screened == 3 and measurer.n_dropped == 1
    assert not multiprocessing.active_children()


def test_a_candidate_that_fails_to_lower_ends_alone(monkeypatch):
    real = screening.lower_candidate

    def fragile(task, config):
        if config.index % 3 == 0:
            os._exit(3)  # dies like a crash in the lowering
        if config.index % 3 == 1:
            raise ValueError("cannot lower")
        return real(task, config)

    monkeypatch.setattr(screening, "lower_candidate", fragile)
    task = _task()
    search = tuning.EvolutionarySearch(task, seed=0, first_guess=False)
    configs = search.random_batch(12, set())
    measurer = screening.ScreeningMeasurer(task, SMALL["measure_option"], screening.build_report)
    try:
        reports = measurer.screen(configs)
    finally:
        measurer.close()
    for c in configs:
        assert (reports[c.index] is None) == (c.index % 3 != 2), c.index
    assert any(c.index % 3 == 2 for c in configs) and not multiprocessing.active_children()
    tuner = task.tune(16, seed=2, **COLD)  # the search drops them and goes on
    assert tuner.trials == 16 and not multiprocessing.active_children()


def test_ctrl_c_while_screening_is_resumable(tmp_path, monkeypatch, capsys):
    task = _task()
    log = tmp_path / "mm.jsonl"
    real = screening.ScreeningMeasurer.screen
    calls = []

    def interrupted(self, configs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, configs)

    monkeypatch.setattr(screening.ScreeningMeasurer, "screen", interrupted)
    tuner = task.tune(64, log=log, seed=0, **COLD)
    assert "interrupted after 16 trials" in capsys.readouterr().err
    assert tuner.trials == 16 and not multiprocessing.active_children()
    monkeypatch.setattr(screening.ScreeningMeasurer, "screen", real)
    task.tune(8, log=log, seed=0, **COLD)
    records = [json.loads(line) for line in open(log)]
    indices = [r["config"]["index"] for r in records]
    assert len(records) == 24 and len(set(indices)) == 24
    assert all(r["result"]["costs"][0] == synthetic_seconds(task_trace(task, r)) for r in records)


def task_trace(task, record):
    from tensorforge.tune.auto import ScheduleTrace

    return ScheduleTrace.from_json(record["config"])
