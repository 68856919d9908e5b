"""The first guess for sizes known only at run time (te.size_vars), sized by hints (a typical
value of each, as Dynamo's example input): the same steps as at those sizes where those do not
rest on a divisor of the size, vectors of whole lanes where a hint is short, and one kernel
correct for every size (each against NumPy)."""

import numpy as np
import pytest
from auto_workloads import softmax

import tensorforge as tf
from tensorforge import te
from tensorforge.tune.auto.analytic import first_guess_schedule

LENGTHS = [2, 3, 5, 13, 16, 17, 31, 61, 64, 65, 127, 197, 509, 1000]  # primes, around vectors


def _symbolic_softmax(least_rows=2):
    rows, m = te.size_var("rows", min_value=least_rows), te.size_var("m", min_value=2)
    return rows, m, softmax(rows, m)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])  # AVX-512 and AVX2 lanes
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("rows_hint, m_hint", [(64, 1001), (5, 197), (2364, 197)])
def test_a_softmax_of_run_time_sizes_is_scheduled_as_at_its_hints(
    target, threads, rows_hint, m_hint, monkeypatch
):
    # rows whose length no vector width divides (8 lanes divide 1000): the static steps rest
    # on no divisor of it
    monkeypatch.setenv("TF_NUM_THREADS", threads)
    static = _decisions(softmax(rows_hint, m_hint)[-1], target)
    rows, m, tensors = _symbolic_softmax()
    assert _decisions(tensors[-1], target, {rows: rows_hint, m: m_hint}) == static
    _, unhinted = first_guess_schedule(tensors[-1], target)  # no hint: nothing to size by
    assert not any(step.kind == "vectorize" for step in unhinted)


def _decisions(output, target, size_hints=None) -> dict:
    """What the first guess decided for `output` (vector steps, partials, locations, ...)."""
    from tensorforge.target import as_target
    from tensorforge.tune.auto.analytic import AnalyticPolicy
    from tensorforge.tune.auto.decisions import Decisions
    from tensorforge.tune.auto.sketch import generate

    target = as_target(target)
    decisions = Decisions(0, policy=AnalyticPolicy(target))
    with target:
        generate(te.create_schedule(output.op), target, decisions, size_hints)
    return decisions.used


def test_a_run_time_row_steps_in_vectors_of_the_target_width():
    # its last step masked vector by vector: 4 unrolled vectors of 16 lanes a step, not one of 64
    rows, m, tensors = _symbolic_softmax()
    s, _ = first_guess_schedule(tensors[-1], "llvm -mcpu=skylake-avx512", {rows: 5, m: 197})
    ir = str(tf.lower(s, tensors, target="llvm -mcpu=skylake-avx512"))
    stores = [line.split(" = ")[0].strip() for line in ir.splitlines() if " exp[" in line[:20]]
    assert len(stores) == 8 and all(store.endswith(", 1, 16)]") for store in stores), stores


def test_a_short_hint_takes_whole_vectors():
    # 19 elements at the hint: two vectors of 16 lanes, the last one's lanes past the row
    # masked (at 19 exactly, the static guess takes a 19-lane step no other length would fit)
    rows, m, tensors = _symbolic_softmax()
    s, steps = first_guess_schedule(tensors[-1], "llvm -mcpu=skylake-avx512", {rows: 3, m: 19})
    exp_splits = [step.params[0] for step in steps if step.kind == "split" and step.stage == 2]
    assert exp_splits == [32, 16], steps  # two vectors a step, each masked on its own


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
def test_one_first_guess_kernel_serves_every_row_length_and_count(target):
    rows, m, tensors = _symbolic_softmax(least_rows=1)
    s, _ = first_guess_schedule(tensors[-1], target, {rows: 12, m: 197})
    kernel = tf.build(s, tensors, target=target)
    rng = np.random.default_rng(0)
    for length in LENGTHS:
        for count in (1, 2, 7):
            data = (rng.standard_normal((count, length)) * 4).astype("float32")
            got = tf.nd.array(np.full((count, length), np.nan, "float32"))
            kernel(tf.nd.array(data), got)
            want = np.exp(data - data.max(-1, keepdims=True))
            want /= want.sum(-1, keepdims=True)
            np.testing.assert_allclose(got.numpy(), want, 1e-5, 1e-6, err_msg=f"{count} x {length}")
