"""The graph fuzzer's sweep: many seeds of graph_fuzz.py's programs, each run (graph_fuzz_run's
`run_case`, then `minimize` where it fails) in a worker process, so that a case that kills its
process (SIGSEGV, SIGFPE, an abort in LLVM) is that case's failure, with its seed and smallest
program, and the sweep goes on in a fresh worker. One worker runs case after case (python and
torch start once, not per case: ~2 s each); a case that runs past --timeout is killed as hung.

    python -m tests.graph.graph_fuzz_run --seed 1000 --cases 2000   # (this module's main)

Ctrl-C stops the sweep and prints the command that resumes it at the seed it stopped on.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

# -- the worker: one process, requests and results as JSON lines --------------------------------


def worker() -> None:
    """Read requests ({"seed", "mode", "outputs", "minimize"}) from stdin, answer each with one
    JSON line on the original stdout; anything else the case prints goes to stderr."""
    import faulthandler

    import torch

    from tests.graph.graph_fuzz import generate
    from tests.graph.graph_fuzz_run import minimize, reproducer, run_case

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (the sweep stops its workers itself)
    faulthandler.enable()  # a crash's Python traceback, to the log
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray prints (Python's and C's) to the log, not into the results
    torch.set_num_threads(1)
    for line in sys.stdin:
        request = json.loads(line)
        case = generate(request["seed"])
        mode, outputs = request["mode"], request["outputs"] or case.outputs
        print(f"### seed {case.seed} {outputs}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        outcome = run_case(case, mode, outputs)
        took = time.perf_counter() - start
        if outcome.kind != "ok" and request["minimize"]:
            outputs, outcome = minimize(case, mode, outcome)
        answer = {
            "kind": outcome.kind,
            "detail": outcome.detail,
            "took": took,
            "reproducer": reproducer(case, outputs, mode),
        }
        results.write(json.dumps(answer) + "\n")
        results.flush()


class Worker:
    """A worker process and the log of its stderr (the last lines tell how a crash happened)."""

    COMMAND = (sys.executable, "-m", "tests.graph.graph_fuzz_sweep", "--worker")

    def __init__(self, command=COMMAND):
        self.log = tempfile.TemporaryFile(mode="a+")  # (appended: reading moves no write)
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log
        )
        self.pending = b""

    def ask(self, request: dict, timeout: float) -> dict:
        """The worker's answer to `request`, or a "crash" or "hang" outcome where it died or
        took longer than `timeout` seconds (then it is gone: start another)."""
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout
        out = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([out], [], [], max(left, 0))
            if not ready:
                self.process.kill()
                self.process.wait()
                return {"kind": "hang", "detail": f"no answer in {timeout:.0f} s\n{self.tail()}"}
            chunk = os.read(out, 1 << 16)
            if not chunk:  # the process died in the case
                return {"kind": "crash", "detail": f"{self.death()}\n{self.tail()}"}
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def death(self) -> str:
        code = self.process.wait()
        if code < 0:
            return f"the process was killed by {signal.Signals(-code).name}"
        return f"the process exited with status {code}"

    def tail(self, lines: int = 25) -> str:
        """The end of the worker's log from the crashed case on (e.g. Python's fatal error
        traceback)."""
        self.log.seek(0)
        text = self.log.read()
        text = text[text.rfind("### seed") :]
        return "\n".join(text.splitlines()[1:][-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


# -- the sweep ----------------------------------------------------------------------------------


def crash_outputs(seed: int, mode: str, kind: str, timeout: float) -> tuple[list[str] | None, dict]:
    """The smallest program prefix (one output) that still crashes or hangs as the seed did,
    each tried in a fresh worker (a crash takes its process with it)."""
    from tests.graph.graph_fuzz import generate, live

    case = generate(seed)
    whole = len(live(case.lines, case.outputs))
    for name in [line.split(" = ")[0] for line in case.lines]:
        if len(live(case.lines, [name])) >= whole:
            continue
        probe = Worker()
        request = {"seed": seed, "mode": mode, "outputs": [name], "minimize": False}
        answer = probe.ask(request, timeout)
        probe.stop()
        if answer["kind"] == kind:
            return [name], answer
    return None, {}


def sweep(args) -> int:
    from tests.graph.graph_fuzz import generate
    from tests.graph.graph_fuzz_run import reproducer

    kinds: dict[str, int] = {}
    eager: dict[str, int] = {}  # operator: reason -> cases that ran it eagerly
    failed: list[int] = []
    started = time.monotonic()
    work = Worker()
    done, seed = 0, args.seed
    try:
        for done, seed in enumerate(range(args.seed, args.seed + args.cases)):
            request = {"seed": seed, "mode": args.mode, "outputs": None}
            request["minimize"] = not args.no_minimize
            answer = work.ask(request, args.timeout)
            kind, detail = answer["kind"], answer["detail"]
            if kind in ("crash", "hang"):
                work.stop()
                work = Worker()
                outputs, smaller = crash_outputs(seed, args.mode, kind, args.timeout)
                detail = smaller.get("detail", detail)
                answer["reproducer"] = reproducer(generate(seed), outputs, args.mode)
            kinds[kind] = kinds.get(kind, 0) + 1
            elapsed = time.monotonic() - started
            first = detail.splitlines()[0] if detail and kind != "ok" else ""
            print(
                f"[{done + 1}/{args.cases} {elapsed:.0f} s] seed {seed}: {kind} "
                f"({answer.get('took', 0):.1f} s) {first}",
                flush=True,
            )
            if args.show or kind != "ok":
                print(answer["reproducer"], flush=True)
            if kind == "ok":
                for reason in detail[len("eager: ") :].split("; ") if detail else []:
                    eager[reason] = eager.get(reason, 0) + 1
                continue
            failed.append(seed)
            print(detail, flush=True)
    except KeyboardInterrupt:
        work.stop()
        left = args.cases - done
        mode = f" --mode {args.mode}" if args.mode != "dynamo" else ""
        print(
            f"\ninterrupted at seed {seed} ({done} of {args.cases} done, failed: {failed}); "
            f"resume: python -m tests.graph.graph_fuzz_run --seed {seed} --cases {left}{mode}"
        )
        return 130
    work.stop()
    for reason, count in sorted(eager.items(), key=lambda item: -item[1]):
        print(f"  eager in {count} cases: {reason}")
    print(
        f"{len(failed)} of {args.cases} failed: {kinds}" + (f", seeds {failed}" if failed else "")
    )
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz the torch.compile backend on the CPU")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--cases", type=int, default=1)
    parser.add_argument("--mode", choices=["aten", "dynamo", "grad"], default="dynamo")
    parser.add_argument("--show", action="store_true", help="print each case's source")
    parser.add_argument("--no-minimize", action="store_true")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per case")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("TENSORFORGE_GRAPH_STRICT", "1")  # (the workers inherit it)
    if args.worker:
        worker()
        return 0
    return sweep(args)


if __name__ == "__main__":
    sys.exit(main())
