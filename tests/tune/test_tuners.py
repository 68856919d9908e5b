"""Tuners: no repeats, exact repetition under a seed, resuming from a log, the xgboost model."""

import importlib.util
import io
import sys

import pytest
from tune_fakes import fake_cost, fake_option

from tensorforge import tune
from tensorforge.tune.callbacks import ProgressBar

needs_xgboost = pytest.mark.skipif(
    importlib.util.find_spec("xgboost") is None, reason="xgboost is not installed (the tune extra)"
)


@pytest.fixture(scope="module")
def task():
    return tune.create_task("test/fake_copy", (64,))  # 7 * 28 = 196 configs


def _sequence(tuner):
    return [c.index for c, _ in tuner.history]


def test_random_tuner_never_repeats_and_exhausts():
    small = tune.create_task("test/fake_copy", (16,))  # 5 * 15 = 75 configs
    tuner = tune.RandomTuner(small, seed=3)
    tuner.tune(len(small.config_space) + 10, fake_option())
    seq = _sequence(tuner)
    assert sorted(seq) == list(range(len(small.config_space)))
    assert not tuner.has_next()
    assert tuner.best_cost == pytest.approx(min(fake_cost(c) for c in small.config_space))


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


@needs_xgboost
def test_xgb_tuner_repeats_under_a_seed(task):
    runs = []
    for seed in (1, 1):
        tuner = tune.XGBTuner(task, plan_size=8, feature_type="knob", n_candidates=64, seed=seed)
        tuner.tune(40, fake_option())
        runs.append(_sequence(tuner))
    assert runs[0] == runs[1]
    assert len(set(runs[0])) == 40
    assert tuner.best_cost <= 2e-4  # within 2x of the one optimum (1e-4), after 40 of 196 configs
    assert tuner.model.trained


@needs_xgboost
def test_xgb_tuner_uses_its_model_after_a_few_random_trials(task):
    tuner = tune.XGBTuner(task, feature_type="knob", n_candidates=64, seed=0)  # plan_size 32
    batches = []
    original = tuner.next_batch
    tuner.next_batch = lambda n: batches.append(original(n)) or batches[-1]
    tuner.tune(16, fake_option())
    assert len(batches[0]) == 8  # random warm-up, then the model ranks the next batch
    assert tuner.knob_model.trained and tuner._fitted_on >= 8


@needs_xgboost
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
    tuner.tune(60, fake_option(), early_stopping=8)
    assert len(tuner.history) < 60
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
