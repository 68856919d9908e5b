"""The search loop: logs, resume without re-measuring, dedup, determinism, Ctrl-C, apply/print.

Candidates are lowered (for their IR features) but not compiled: a fake runner gives each a
synthetic time from its decisions, so these tests run fast and need no quiet machine."""

import json
import math

import pytest
from auto_workloads import CASES

from tensorforge import tune
from tensorforge.tune.auto import SearchTask, tuning


def fake_builder(task, config, feature_fn):
    import tensorforge as tf

    s, tensors = task.instantiate(config)
    func = tf.lower(s, tensors)
    return config, (feature_fn(func) if feature_fn else None)


def synthetic_seconds(trace):
    """Faster with a wider inner tile and a cache stage: something for the model to learn."""
    tiles = trace.decisions.get("tile:2.C", [[1, 1, 1], [1, 1, 1]])
    inner = math.prod(t[-1] for t in tiles) * tiles[-1][-2]
    return 1e-3 / (1 + math.log2(inner)) * (0.7 if trace.decisions.get("cw:2.C") else 1.0)


def fake_runner(task, mod, option, reference):
    return [synthetic_seconds(mod)]


OPTION = tune.measure_option(builder=fake_builder, runner=fake_runner, n_parallel=2, timeout=30)
SMALL = {
    "measure_option": OPTION,
    "progress": False,
    "population": 16,
    "generations": 2,
    "batch_size": 8,
    "shortlist": 2,
}


def _task():
    func, _, _ = CASES["matmul"]
    return SearchTask(func, (12, 5, 16), "llvm")


def _records(path):
    return [json.loads(line) for line in open(path)]


def test_tune_logs_resumes_and_applies_best(tmp_path):
    task = _task()
    log = tmp_path / "mm.jsonl"
    tuner = task.tune(16, log=log, seed=1, **SMALL)
    assert tuner.trials == 16 and len(_records(log)) == 16
    again = task.tune(8, log=log, seed=2, **SMALL)
    records = _records(log)
    assert again.trials == 8 and len(records) == 24
    indices = [r["config"]["index"] for r in records]
    assert len(set(indices)) == len(indices)  # nothing measured twice, across the resume
    best = min(records, key=lambda r: r["result"]["costs"][0])
    assert task.best_trace(log).index == best["config"]["index"]
    assert math.isclose(again.best_cost, best["result"]["costs"][0])
    s, tensors = task.apply_best(log)
    import tensorforge as tf

    tf.lower(s, tensors)
    assert "s = te.create_schedule([C.op])" in task.print_best(log)


def test_same_seed_same_search(tmp_path):
    task = _task()
    first = task.tune(16, log=tmp_path / "a.jsonl", seed=7, **SMALL)
    second = task.tune(16, log=tmp_path / "b.jsonl", seed=7, **SMALL)
    a = [r["config"]["index"] for r in _records(tmp_path / "a.jsonl")]
    b = [r["config"]["index"] for r in _records(tmp_path / "b.jsonl")]
    assert a == b and first.best_cost == second.best_cost


def test_ctrl_c_leaves_the_log_resumable(tmp_path, monkeypatch, capsys):
    task = _task()
    log = tmp_path / "mm.jsonl"
    real = tuning.ScreeningMeasurer.measure
    calls = []

    def interrupted(self, configs, on_result=None):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, configs, on_result)

    monkeypatch.setattr(tuning.ScreeningMeasurer, "measure", interrupted)
    tuner = task.tune(64, log=log, seed=0, **SMALL)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted after 8 trials" in err[0] and "resume" in err[0]
    assert tuner.trials == 8 and len(_records(log)) == 8
    monkeypatch.setattr(tuning.ScreeningMeasurer, "measure", real)
    resumed = task.tune(4, log=log, seed=0, **SMALL)
    assert len(_records(log)) == 12 and resumed.search.best[0] <= tuner.best_cost


def test_random_search_without_model(tmp_path):
    task = _task()
    tuner = task.tune(8, log=tmp_path / "r.jsonl", seed=0, model=False, **SMALL)
    assert tuner.trials == 8 and tuner.search._models is None


def test_task_scheduler_gives_trials_where_time_goes(tmp_path):
    from tensorforge.tune.auto import TaskScheduler

    func, _, _ = CASES["matmul"]
    heavy, light = SearchTask(func, (12, 5, 16)), SearchTask(func, (4, 3, 8))
    log = tmp_path / "model.jsonl"
    options = {k: v for k, v in SMALL.items() if k not in ("progress", "batch_size")}
    sched = TaskScheduler([heavy, light], weights=[100, 1], log=log, slice_trials=8, **options)
    sched.tune(32, progress=False)
    assert sum(sched.allocation) == 32
    assert sched.allocation[0] > sched.allocation[1] >= 8  # warm-up slice, then by weight
    keys = {(r["args"][0]) for r in _records(log)}
    assert keys == {12, 4}
    assert math.isfinite(sched.total_cost)


def test_tile_mutation_keeps_tiles_legal():
    import numpy as np

    from tensorforge.tune.auto.decisions import _valid_tiles, mutate_tile, sample_tile

    rng = np.random.default_rng(0)
    extents = [1, 7, 96, 1024]
    value = [sample_tile(rng, e, 4) for e in extents]
    seen = set()
    for _ in range(300):
        value = mutate_tile(rng, value, extents)
        assert _valid_tiles(value, extents, 4), value
        seen.add(str(value))
    assert len(seen) > 100  # it walks the space, not in place


@pytest.fixture
def lowered(monkeypatch):
    """The indices of the traces the search lowers in the parent process, in order."""
    from tensorforge.tune.auto.search import EvolutionarySearch

    real_lower = EvolutionarySearch.lower
    indices = []

    def counting_lower(self, trace):
        indices.append(trace.index)
        return real_lower(self, trace)

    monkeypatch.setattr(EvolutionarySearch, "lower", counting_lower)
    return indices


def test_guided_search_without_lowering_in_the_parent(tmp_path, lowered):
    """lower_shortlist=False (the default, with or without the first guess): the model ranks
    candidates by their decisions (the builds report IR hashes and features); True lowers the
    shortlist and ranks it by IR too, in the measurement processes (lower_in_workers=False: in
    this one)."""
    task = _task()
    guided = task.tune(16, seed=3, **SMALL)  # the default, from the first guess
    assert not lowered and guided.trials == 16
    assert guided.search._models is not None and guided.search._models[1] is None
    cold = task.tune(16, seed=3, first_guess=False, **SMALL)
    assert not lowered and cold.search.lower_shortlist is False and cold.time_screen_dropped == 0
    screened = task.tune(16, seed=3, first_guess=False, lower_shortlist=True, **SMALL)
    assert not lowered and screened.trials == 16
    assert screened.time_screen_dropped > 0
    assert screened.measure_fraction_strict < screened.measure_fraction
    indices = [t.index for t, _ in screened.search.history]
    assert len(set(indices)) == len(indices)
    here = task.tune(
        16, seed=3, first_guess=False, lower_shortlist=True, lower_in_workers=False, **SMALL
    )
    assert lowered and here.trials == 16


def test_local_mutants_of_the_fastest_are_new_and_deterministic():
    """`local` of each batch: unranked mutants of the 4 fastest measured schedules."""
    task = _task()
    runs = [task.tune(16, seed=4, local=0.5, **SMALL) for _ in range(2)]
    search = runs[0].search
    assert [t.index for t, _ in search.history] == [t.index for t, _ in runs[1].search.history]
    out = search.local_batch(4, set(search.measured))
    assert len(out) == 4 and not {t.index for t in out} & set(search.measured)


def test_lower_shortlist_for_the_first_trials_only(lowered):
    """lower_shortlist=N lowers candidates in the parent only while fewer than N trials are
    measured: a longer run of the same seed lowers no more than a shorter one."""
    task = _task()
    counts = []
    for trials in (16, 24):
        lowered.clear()
        task.tune(trials, seed=5, lower_shortlist=9, lower_in_workers=False, **SMALL)
        counts.append(len(lowered))
    assert counts[0] > 0 and counts[1] == counts[0]


def test_each_candidate_is_lowered_once(lowered):
    """A candidate shortlisted in one batch and proposed again is not lowered again (its IR,
    shortlisted once, keeps it out)."""
    task = _task()
    tuner = task.tune(
        40, seed=6, first_guess=False, lower_shortlist=True, lower_in_workers=False, **SMALL
    )
    assert len(lowered) > 16 and len(set(lowered)) == len(lowered)
    search = tuner.search
    assert {r[0] for r in search.reports.values() if r} <= search.ir_seen


class _WideMeasurer:
    """A measurer that, like tune.RayRunner's, asks for batches of `batch_size`."""

    def __init__(self, batch_size, seen):
        self.batch_size, self.seen, self.features = batch_size, seen, {}

    def measure(self, batch, on_result=None):
        from tensorforge.tune.measure import MeasureResult

        self.seen.append(len(batch))
        return [
            MeasureResult(
                costs=(1e-3 * (1 + k),), error_no=0, error_msg="", all_cost=0.0, timestamp=0.0
            )
            for k in range(len(batch))
        ]


class _WideRunner:
    def __init__(self, batch_size):
        self.batch_size, self.seen = batch_size, []

    def create_measurer(self, task, option, feature_fn):
        return _WideMeasurer(self.batch_size, self.seen)

    def __call__(self, *args):  # a runner (as RayRunner), never called per candidate
        raise AssertionError("a whole-run runner is not called per candidate")


@pytest.mark.parametrize(
    "model, wanted, expected", [(False, 40, [40, 40, 20]), (True, 100, [64, 36])]
)
def test_a_measurer_that_asks_for_larger_batches_gets_them(model, wanted, expected):
    # a Ray measurer keeps builds in flight with larger batches; a guided search still ranks
    # every 64, a random one takes them whole
    task = SearchTask(func=CASES["matmul"][0], args=(24, 17, 40), target="llvm")
    runner = _WideRunner(wanted)
    tuner = tuning.TaskTuner(task, seed=0, model=model)
    tuner.run(100, tune.measure_option(runner=runner))
    assert runner.seen == expected
