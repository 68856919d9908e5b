"""The graph fuzzer (graph_fuzz.py) at a small scale: fixed seeds, each a random program of the
operators the backend lowers, compiled through Dynamo (static and dynamic sizes) and compared
with eager torch on fresh inputs; a failure prints the smallest failing program. The wide sweep:
`python -m tests.graph.graph_fuzz_run --seed 1000 --cases 2000` (a summary of what failed and of
the operators run eagerly at the end)."""

import pytest

torch = pytest.importorskip("torch")

from tests.graph import graph_fuzz, graph_fuzz_run  # noqa: E402

# about 0.6 s each on a 2-core machine; 23375: selects on a value's own sign, nested, under
# dynamic shapes (each load's predicate copied its condition: 2.3 M characters of IR, 4 min)
SEEDS = [*range(40), 23375]


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def check_seed(seed: int, mode: str) -> None:
    case = graph_fuzz.generate(seed)
    outcome = graph_fuzz_run.run_case(case, mode)
    if outcome.kind != "ok":
        outputs, outcome = graph_fuzz_run.minimize(case, mode, outcome)
        pytest.fail(
            f"{outcome.kind}: {outcome.detail}\n{graph_fuzz_run.reproducer(case, outputs, mode)}"
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program_matches_eager(seed):
    check_seed(seed, "dynamo")


def test_generation_is_deterministic():
    assert graph_fuzz.generate(7).source() == graph_fuzz.generate(7).source()


# 22207: group norm's backward under dynamic shapes fills a tensor with a run-time size;
# 23109: a cast to bfloat16 before fmax and cos(40 x): gradients judged against float32's
@pytest.mark.parametrize("seed", [*range(6), 22207, 23109])
def test_random_program_gradients_match_eager(seed):
    # the same programs as training graphs (graph/training.py): outputs, then the gradients of
    # the floating inputs
    check_seed(seed, "grad")
