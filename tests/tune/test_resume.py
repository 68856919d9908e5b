"""A tuning run killed with SIGKILL leaves a valid log, and resuming re-measures nothing."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from tensorforge import tune

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {here!r})
    from tensorforge import tune
    from tune_fakes import fake_option

    log, total = sys.argv[1], int(sys.argv[2])
    task = tune.create_task("test/fake_copy", (64,))
    tuner = tune.RandomTuner(task, seed=5)
    done = tuner.load_history(log) if os.path.exists(log) else 0
    tuner.tune(total - done, fake_option(), callbacks=[tune.log_to_file(log)])
    print("resumed", done, "measured", len(tuner.history) - done)
    """
)


def _run(script, log, total, **kwargs):
    env = {**os.environ, "TF_FAKE_RUN_SECONDS": kwargs.pop("delay", "0")}
    return subprocess.Popen(
        [sys.executable, str(script), str(log), str(total)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill takes its workers too
        **kwargs,
    )


def _group_gone(pgid, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    return False


def _lines(path):
    return path.read_text().count("\n") if path.exists() else 0


def test_sigkill_then_resume(tmp_path):
    script = tmp_path / "tune_script.py"
    script.write_text(SCRIPT.format(here=HERE))
    log = tmp_path / "killed.jsonl"

    proc = _run(script, log, 40, delay="0.15")
    deadline = time.monotonic() + 60
    while _lines(log) < 6 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the tuner only: its measuring processes must follow it
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert _group_gone(proc.pid, within=10), "the killed tuner left processes behind"

    before = tune.load_records(log)
    assert 6 <= len(before) < 40
    assert all(r.result.ok for r in before)
    # as if the kill had landed mid-write: half a record at the end
    with open(log, "a") as f:
        f.write(log.read_text().splitlines()[0][:50])
    assert len(tune.load_records(log)) == len(before)

    proc = _run(script, log, 40)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert f"resumed {len(before)} measured {40 - len(before)}" in out
    after = tune.load_records(log)
    indices = [r.config["index"] for r in after]
    assert len(indices) == 40 and len(set(indices)) == 40  # nothing measured twice
    assert [r.config for r in after[: len(before)]] == [r.config for r in before]
