"""The analytic prior and the cold start it seeds: the best-scored of many random samples are
measured first, deterministically per seed, and are correct schedules at awkward sizes."""

import json

import pytest
from auto_workloads import CASES, check
from test_auto_search import SMALL

from tensorforge.tune.auto import SearchTask
from tensorforge.tune.auto.analytic import first_guess
from tensorforge.tune.auto.prior import Prior
from tensorforge.tune.auto.search import EvolutionarySearch


def _tiles(rows, columns):
    return {"tile:2.C": [[1, 1, rows], [1, 1, columns]], "rtile:2.C": [[8]]}


def test_prior_prefers_register_tiles_that_fit():
    """A tile of several rows and whole vectors beats one row of one lane, and one that spills
    (more accumulators than vector registers) or leaves lanes idle."""
    task = SearchTask(CASES["matmul"][0], (64, 64, 64), "llvm")
    prior = Prior(task)
    lanes = task.target_obj.vector_lanes("float32")
    good = prior.score_decisions(_tiles(4, 2 * lanes))
    assert good > prior.score_decisions(_tiles(1, 1))
    assert good > prior.score_decisions(_tiles(16, 4 * lanes))  # 64 accumulators: spills
    assert good > prior.score_decisions(_tiles(4, 2 * lanes - 3))  # a masked last vector
    assert prior.score(first_guess(task)) >= good / 2
    assert prior.score_decisions({"unroll:2.C": 16}) == 1.0  # no tile: no opinion


def test_cold_start_measures_the_best_scored_samples_first():
    task = SearchTask(CASES["matmul"][0], (64, 48, 96), "llvm")
    search = EvolutionarySearch(task, seed=0, first_guess=False, epsilon=0.125)
    batch = search.next_batch(16)
    again = EvolutionarySearch(task, seed=0, first_guess=False, epsilon=0.125).next_batch(16)
    assert [t.index for t in batch] == [t.index for t in again]  # deterministic per seed
    assert len({t.index for t in batch}) == 16
    scores = [search.prior.score(t) for t in batch[:14]]
    assert scores == sorted(scores, reverse=True)  # best first; then 2 plain random draws
    randoms = [task.sample(seed) for seed in range(64)]
    median = sorted(search.prior.score(t) for t in randoms)[32]
    assert min(scores) >= median


@pytest.mark.parametrize(
    "name, args",
    [("matmul", (1, 13, 97)), ("matmul", (61, 1, 2)), ("matmul_bias_gelu", (23, 1, 37))],
)
def test_seeded_population_is_correct_on_odd_shapes(name, args):
    """The prior-seeded first batch at primes and 1s: each schedule built and compared with
    NumPy on random data."""
    func, _, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    batch = EvolutionarySearch(task, seed=1, first_guess=False).next_batch(4)
    assert batch
    for k, trace in enumerate(batch):
        s, tensors = task.instantiate(trace)
        check(task, s, tensors, reference, seed=k)


def test_cold_search_is_deterministic_and_generates_each_fixed_candidate_once():
    task = SearchTask(CASES["matmul"][0], (12, 5, 16), "llvm")
    runs = [task.tune(24, seed=8, first_guess=False, **SMALL) for _ in range(2)]
    assert [t.index for t, _ in runs[0].search.history] == [
        t.index for t, _ in runs[1].search.history
    ]
    search = runs[0].search
    assert search._made  # mutants and crossovers with every decision given: kept
    made = search.n_made
    for fixed in list(search._made)[:20]:
        search._make(json.loads(fixed))
    assert search.n_made == made  # taken from the store, not generated again
