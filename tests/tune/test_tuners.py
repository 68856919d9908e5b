"""Tuners: no repeats, exact repetition under a seed, resuming from a log, the xgboost model."""

import io
import sys

import pytest

from tensorforge import tune
from tensorforge.tune.callbacks import ProgressBar

from tests.tune.fakes import fake_cost, fake_option


@pytest.fixture(scope="module")
def task():
    return tune.create_task("test/fake_copy", (64,))  # 7 * 28 = 196 configs


def _sequence(tuner):
    return [c.index for c, _ in tuner.history]


def test_random_tuner_never_repeats_and_exhausts(task):
    tuner = tune.RandomTuner(task, seed=3)
    tuner.tune(len(task.config_space) + 10, fake_option())
    seq = _sequence(tuner)
    assert sorted(seq) == list(range(len(task.config_space)))
    assert not tuner.has_next()
    assert tuner.best_cost == pytest.approx(min(fake_cost(c) for c in task.config_space))


def test_seeds_repeat_exactly(task):
    runs = []
    for seed in (7, 7, 8):
        tuner = tune.RandomTuner(task, seed=seed)
        tuner.tune(20, fake_option())
        runs.append(_sequence(tuner))
    assert runs[0] == runs[1] != runs[2]


def test_grid_tuner_goes_in_order(task):
    tuner = tune.GridSearchTuner(task)
    tuner.visited.add(1)
    tuner.tune(5, fake_option())
    assert _sequence(tuner) == [0, 2, 3, 4, 5]


def test_xgb_tuner_repeats_under_a_seed_and_beats_chance(task):
    runs = []
    for seed in (1, 1):
        tuner = tune.XGBTuner(task, plan_size=8, feature_type="knob", pool_size=64, seed=seed)
        tuner.tune(40, fake_option())
        runs.append(_sequence(tuner))
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 40
    assert tuner.best_cost == pytest.approx(1e-4)  # the optimum, within 40 of 196 configs
    assert tuner.model.trained


def test_load_history_resumes_without_remeasuring(task, tmp_path):
    log = tmp_path / "log.jsonl"
    first = tune.RandomTuner(task, seed=0)
    first.tune(12, fake_option(), callbacks=[tune.log_to_file(log)])
    second = tune.XGBTuner(task, plan_size=8, feature_type="knob", seed=0)
    assert second.load_history(log) == 12
    assert second.best_cost == first.best_cost
    second.tune(12, fake_option(), callbacks=[tune.log_to_file(log)])
    indices = [r.config["index"] for r in tune.load_records(log)]
    assert len(indices) == 24 and len(set(indices)) == 24
    # records of another workload are ignored
    other = tune.RandomTuner(tune.create_task("test/fake_copy", (32,)), seed=0)
    assert other.load_history(log) == 0


def test_early_stopping(task):
    tuner = tune.GridSearchTuner(task)
    tuner.tune(len(task.config_space), fake_option(), early_stopping=8)
    assert len(tuner.history) < len(task.config_space)
    assert len(tuner.history) - tuner.best_iter >= 8


def test_xgb_tuner_without_xgboost_says_how_to_install(task, monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", None)  # makes `import xgboost` fail
    with pytest.raises(tune.TuneError, match="pip install"):
        tune.XGBTuner(task)


def test_progress_bar_plain_line(task):
    stream = io.StringIO()
    bar = ProgressBar(stream=stream, use_tqdm=False)
    tuner = tune.RandomTuner(task, seed=0)
    tuner.tune(5, fake_option(), callbacks=[bar])
    text = stream.getvalue()
    assert "\r" in text and "[5/5]" in text and "GFLOP/s" in text and text.endswith("\n")
    assert tuner.measure_fraction > 0
