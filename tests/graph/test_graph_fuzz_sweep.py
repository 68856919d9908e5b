"""The sweep's worker plumbing (graph_fuzz_sweep.Worker) with a stand-in worker: an answer comes
back, a worker that dies in a case is a "crash" that names the signal and shows its last words,
one that stops answering is a "hang" (killed), and a fresh worker carries on."""

import signal
import sys
import textwrap

from tests.graph.graph_fuzz_sweep import Worker

STAND_IN = textwrap.dedent(
    """
    import json, os, signal, sys, time
    for line in sys.stdin:
        seed = json.loads(line)["seed"]
        print("### seed", seed, file=sys.stderr, flush=True)
        if seed == 2:
            print("dividing by -1", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGFPE)
        if seed == 3:
            time.sleep(60)
        print(json.dumps({"kind": "ok", "detail": f"seed {seed}"}), flush=True)
    """
)


def stand_in() -> Worker:
    return Worker((sys.executable, "-c", STAND_IN))


def test_a_crash_and_a_hang_are_outcomes_and_a_fresh_worker_goes_on():
    work = stand_in()
    assert work.ask({"seed": 1}, timeout=30) == {"kind": "ok", "detail": "seed 1"}
    crash = work.ask({"seed": 2}, timeout=30)
    assert crash["kind"] == "crash"
    assert crash["detail"] == f"the process was killed by {signal.SIGFPE.name}\ndividing by -1"
    work.stop()
    work = stand_in()
    hang = work.ask({"seed": 3}, timeout=1)
    assert hang["kind"] == "hang" and hang["detail"].startswith("no answer in 1 s")
    assert work.process.poll() is not None  # (killed)
    work = stand_in()
    assert work.ask({"seed": 4}, timeout=30)["detail"] == "seed 4"
    work.stop()
