"""The schedule fuzzer at a CI budget, its guard pages and its shrinker (the bugs it found:
test_fuzz_regressions.py).

Each hypothesis example draws a computation and a random legal schedule, builds it in a child
process and compares it with NumPy on arrays that sit against PROT_NONE guard pages. The long
runs are `python -m tensorforge.testing.fuzz --examples N`.
"""

import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensorforge as tf
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import BufferStore, For, PrimFunc
from tensorforge.te.expr import Var, const
from tensorforge.testing import fuzz_run
from tensorforge.testing.fuzz import cases, draw_case, report, shrink
from tensorforge.testing.fuzz_choice import RandomChooser
from tensorforge.testing.fuzz_families import FAMILIES
from tensorforge.testing.fuzz_run import Case, Outcome, run_isolated, skip_verify
from tensorforge.testing.guarded import GuardError, check_all, guarded_copy, guarded_empty
from tests.testing.fuzz_child import in_child

EXAMPLES_PER_FAMILY = 20  # x 8 families: about a minute on two cores


# -- the fuzzer, at CI size ------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fuzz_schedules_match_numpy(family):
    @settings(
        max_examples=EXAMPLES_PER_FAMILY,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases([family]))
    def check(case):
        outcome = run_isolated(case)
        assert not outcome.failed, report(case, outcome)

    check()


def test_printed_script_runs_on_its_own(tmp_path):
    case = Case(
        "stencil",
        (("rank", 1), ("n", 13), ("m", 1), ("taps", 3), ("chain", 1)),
        (
            's[C].split(axis(s[C], "i"), factor=4, tail="peel")',
            's[B].compute_at(s[C], axis(s[C], "i.outer"))',
            's[C].vectorize(axis(s[C], "i.inner"))',
        ),
        side="start",
        exact=True,
    )
    script = tmp_path / "case.py"
    script.write_text(case.script())
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ok: matches numpy" in done.stdout


def test_command_line_runs_examples():
    done = subprocess.run(
        [sys.executable, "-m", "tensorforge.testing.fuzz", "--examples", "3", "--seed", "5"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "3 examples in" in done.stdout and "0 failing example(s)" in done.stdout


# -- guard pages and sentinels ---------------------------------------------------------------------


def copy_kernel(n, read_shift=0, write_shift=0, count=None):
    """B[i + write_shift] = A[i + read_shift] for i in range(count): hand-built, unverified IR."""
    A = Buffer("A", (const(n),), "float32")
    B = Buffer("B", (const(n),), "float32")
    i = Var("i")
    body = For(
        i,
        const(0),
        const(count or n),
        BufferStore(B, (i + write_shift,), BufferLoad(A, (i + read_shift,))),
    )
    return tf.build(PrimFunc("main", (A, B), body))  # a PrimFunc skips the pass pipeline


@pytest.mark.parametrize("side,shift", [("end", 1), ("start", -1)])
def test_guard_page_faults_on_out_of_bounds_read(side, shift):
    mod = copy_kernel(100, read_shift=shift)  # reads A[99 + 1] or A[0 - 1]

    def call():
        a = guarded_copy(np.ones(100, "float32"), side=side, align=4, name="A")
        b = guarded_empty((100,), side=side, align=4, name="B")
        mod(a.array, b.array)

    assert in_child(call) == -11  # SIGSEGV on the guard page, and the test process lives on


def test_guard_page_faults_on_write_past_the_end():
    mod = copy_kernel(100, write_shift=1)  # writes B[100]

    def call():
        a = guarded_copy(np.ones(100, "float32"), align=4, name="A")
        b = guarded_empty((100,), align=4, name="B")
        mod(a.array, b.array)

    assert in_child(call) == -11


def test_sentinel_catches_a_write_into_the_alignment_gap():
    mod = copy_kernel(
        10, write_shift=1
    )  # 40 bytes of data, 64-byte aligned: B[10] lands in the gap

    def call():
        a = guarded_copy(np.ones(10, "float32"), name="A")
        b = guarded_empty((10,), name="B")
        mod(a.array, b.array)
        try:
            check_all([a, b])
        except GuardError as e:
            assert "sentinel byte(s) after 'B' were overwritten (first at byte offset 40" in str(e)
            raise

    assert in_child(call) == 3


def test_unwritten_output_reads_nan_and_a_modified_input_is_reported():
    b = guarded_empty((4,), name="B")
    assert np.isnan(b.array).all()
    a = guarded_copy(np.arange(4, dtype="float32"), name="A")
    a.array[2] = 7.0
    with pytest.raises(GuardError, match="input 'A' was modified by the kernel"):
        a.check()
    ints = guarded_empty((3,), "int32", side="start")
    assert (ints.array == ints.array[0]).all() and ints.array[0] != 0


def test_crash_and_hang_are_reported_not_fatal():
    # a case's statements run in the child: make one die on a PROT_NONE page, one hang
    crash = STENCIL.with_steps(("import ctypes; ctypes.string_at(0)",))
    outcome = run_isolated(crash)
    assert outcome.status == "crash" and "SIGSEGV" in outcome.message
    spin = STENCIL.with_steps(("while True: pass",))  # the time limit is on CPU time
    outcome = run_isolated(spin, timeout=2)
    assert outcome.status == "timeout" and "of CPU time" in outcome.message


def test_a_case_that_spends_no_cpu_times_out_on_wall_time(monkeypatch):
    # a deadlock spends no CPU time: WALL_FACTOR times the limit of wall time ends it
    monkeypatch.setattr(fuzz_run, "WALL_FACTOR", 2)
    sleep = STENCIL.with_steps(("import time; time.sleep(60)",))
    assert run_isolated(sleep, timeout=1).status == "timeout"


def test_cpu_seconds_counts_this_process():
    assert fuzz_run.cpu_seconds(os.getpid()) > 0 and fuzz_run.cpu_seconds(-1) is None


# -- a deliberately broken bound inference is caught -------------------------------------------------

STENCIL = Case(
    "stencil",
    (("rank", 1), ("n", 37), ("m", 1), ("taps", 2), ("chain", 1)),
    (
        's[C].split(axis(s[C], "i"), factor=8, tail="auto")',
        's[B].compute_at(s[C], axis(s[C], "i.outer"))',
    ),
)


def test_targeted_stencil_passes_unbroken():
    assert run_isolated(STENCIL).status == "ok"


def test_broken_bound_inference_is_caught():
    from tests.schedule.faults import SHRINK_REGIONS  # every compute_at region 1 too small

    # the IR verifier sees the consumer read one element past the producer's allocation
    caught = run_isolated(STENCIL, patches=SHRINK_REGIONS)
    assert caught.status == "lowering" and "load from 'B' is out of bounds" in caught.message
    # without the verifier, the NaN / sentinel-filled guarded arrays and NumPy still catch it
    unverified = run_isolated(
        STENCIL,
        patches=(*SHRINK_REGIONS, ("tensorforge.ir.pipeline", "verify_func", skip_verify)),
    )
    assert unverified.failed and unverified.status in ("mismatch", "guard", "crash"), unverified


def test_random_stencil_schedules_catch_broken_bound_inference():
    from tests.schedule.faults import SHRINK_REGIONS

    def run(case):
        return run_isolated(case, patches=SHRINK_REGIONS)

    tried = 0
    for seed in range(60):
        case = draw_case(RandomChooser(random.Random(f"broken-bounds-{seed}")), ["stencil"])
        if not any(".compute_at(" in step for step in case.steps):
            continue
        tried += 1
        outcome = run(case)
        if outcome.failed:
            small, small_outcome = shrink(case, outcome, run, max_runs=25)
            assert small_outcome.failed and any(".compute_at(" in step for step in small.steps)
            assert "s[B].compute_at(" in report(small, small_outcome)
            return
        assert tried < 6, "the fuzzer missed a broken bound inference"
    pytest.fail("no stencil case with compute_at drawn")


# -- the shrinker ----------------------------------------------------------------------------------


def test_shrink_keeps_only_what_the_failure_needs():
    case = Case(
        "matmul",
        (("n", 17), ("l", 9), ("m", 23), ("epilogue", 1)),
        ("step_a()", "the_culprit()", "step_b()", "step_c()"),
    )

    def fake_run(c: Case) -> Outcome:  # fails while the culprit is there and m >= 5
        bad = "the_culprit()" in c.steps and dict(c.params)["m"] >= 5
        return Outcome("mismatch", "differs") if bad else Outcome("ok")

    small, outcome = shrink(case, fake_run(case), run=fake_run)
    assert small.steps == ("the_culprit()",)
    assert dict(small.params) == {"n": 1, "l": 1, "m": 5, "epilogue": 0}
    assert outcome.status == "mismatch"


def test_report_is_a_script_with_the_message():
    text = report(STENCIL, Outcome("mismatch", "output 'C' differs from numpy"))
    assert "# output 'C' differs from numpy" in text
    assert 's[B].compute_at(s[C], axis(s[C], "i.outer"))' in text
    compile(text, "<report>", "exec")
