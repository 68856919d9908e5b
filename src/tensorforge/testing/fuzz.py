"""The schedule fuzzer: random computations under random legal schedules, checked against NumPy.

    python -m tensorforge.testing.fuzz --examples 2000 [--seed S] [--family F] [--jobs J] [--out DIR]
                                       [--target c]

Each example draws a computation (`fuzz_families`), a legal schedule (`fuzz_schedules`) and
where the guard pages sit, then builds and runs it in a child process on arrays that sit
against PROT_NONE pages (`guarded`), comparing every output with NumPy (`fuzz_run`). A failure
(wrong values, a crash, bytes written beside an array, an exception, a rejected legal schedule)
With `--target c` each case is built for that target and its outputs are compared with NumPy and
with the llvm kernel's on the same inputs (differential testing between two backends). A failure
is shrunk greedily (schedule steps dropped one by one, parameters made smaller, as long as the
failure stays the same kind) and printed as a runnable script. In the test suite hypothesis
draws the same cases (`cases()`) and shrinks them itself.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait

from tensorforge.target import KINDS
from tensorforge.testing.fuzz_choice import Chooser, HypothesisChooser, RandomChooser
from tensorforge.testing.fuzz_families import FAMILIES, param_minimum
from tensorforge.testing.fuzz_run import PRELUDE, Case, Outcome, Running, run_isolated, start
from tensorforge.testing.fuzz_schedules import KNOWN_BUGS, draw_schedule


def draw_case(
    ch: Chooser,
    families: Sequence[str] | None = None,
    known_bugs: bool = False,
    target: str = "llvm",
) -> Case:
    """One example: a computation from `families` (all by default) and a legal schedule for it,
    built for `target` (a CPU target kind).

    Unless `known_bugs`, nothing is drawn that would hit a bug listed in KNOWN_BUGS.
    """
    family = ch.choice(list(families or FAMILIES))
    params = FAMILIES[family][0](ch)
    case = Case(
        family,
        tuple(params.items()),
        side=ch.choice(("end", "start")),
        exact=ch.chance(0.5),
        seed=ch.integer(0, 9999),
        target=target,
    )
    return case.with_steps(draw_schedule(ch, PRELUDE, case.setup_source(), known_bugs))


def cases(families: Sequence[str] | None = None, known_bugs: bool = False, target: str = "llvm"):
    """A hypothesis strategy of fuzz cases (shrinks towards fewer steps and smaller shapes)."""
    from hypothesis import strategies as st

    @st.composite
    def strategy(draw):
        return draw_case(HypothesisChooser(draw), families, known_bugs, target)

    return strategy()


def shrink(
    case: Case, outcome: Outcome, run: Callable[[Case], Outcome] = run_isolated, max_runs: int = 150
) -> tuple[Case, Outcome]:
    """The smallest case found that still fails the same way, greedily: drop each schedule step,
    drop extra element-wise ops, make each parameter smaller; repeat while something helps."""
    runs = 0

    def attempt(candidate: Case) -> Outcome | None:
        nonlocal runs
        runs += 1
        try:
            candidate.setup_source()
        except Exception:  # noqa: BLE001 - parameters the family cannot build
            return None
        got = run(candidate)
        return got if got.status == outcome.status else None

    best, best_outcome = case, outcome
    changed = True
    while changed and runs < max_runs:
        changed = False
        for i in reversed(range(len(best.steps))):
            if runs >= max_runs:
                break
            candidate = best.with_steps(best.steps[:i] + best.steps[i + 1 :])
            got = attempt(candidate)
            if got is not None:
                best, best_outcome, changed = candidate, got, True
        params = dict(best.params)
        for key in list(params):
            if runs >= max_runs:
                break
            floor = param_minimum(key)
            options = [
                v
                for v in sorted({floor, floor + 1, params[key] // 2, params[key] - 1})
                if floor <= v < params[key]
            ]
            if re.fullmatch(r"op[1-9]", key):
                options.insert(0, None)  # drop this element-wise op altogether
            for value in options:
                trial = dict(params)  # same order: the printed case keeps its shape
                if value is None:
                    del trial[key]
                else:
                    trial[key] = value
                got = attempt(best.with_params(trial))
                if got is not None:
                    best, best_outcome, changed = best.with_params(trial), got, True
                    params = dict(best.params)
                    break
    return best, best_outcome


def report(case: Case, outcome: Outcome) -> str:
    """A failure as a message and the runnable script that reproduces it."""
    bar = "#" * 100
    return (
        f"{bar}\n# fuzz failure ({outcome.status}): {case.family}, {len(case.steps)} schedule step(s)\n"
        f"# {outcome.message.replace(chr(10), chr(10) + '# ')}\n{bar}\n{case.script()}{bar}\n"
    )


def signature(case: Case, outcome: Outcome) -> str:
    """Failures that look alike (same kind, same family, same message up to numbers)."""
    first = outcome.message.splitlines()[0] if outcome.message else ""
    return f"{outcome.status}/{case.family}/{re.sub(r'[0-9]+', 'N', first)[:120]}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tensorforge.testing.fuzz", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--family", action="append", choices=sorted(FAMILIES), help="only this family (repeatable)"
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="cases run at once (each in its own process)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds before a case counts as a hang"
    )
    parser.add_argument("--out", default=None, help="write each shrunk failure here as a script")
    parser.add_argument(
        "--max-reports", type=int, default=10, help="distinct failures to shrink and print"
    )
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument(
        "--target",
        default="llvm",
        choices=[kind for kind, facts in KINDS.items() if facts.device == "cpu"],
        help="build for this CPU target kind; other than llvm, also compare with llvm's output",
    )
    parser.add_argument(
        "--known-bugs", action="store_true", help="also draw cases that hit KNOWN_BUGS"
    )
    args = parser.parse_args(argv)

    began = time.time()
    statuses: Counter[str] = Counter()
    per_family: Counter[str] = Counter()
    steps_total = 0
    failures: dict[str, list[tuple[int, Case, Outcome]]] = {}
    running: list[tuple[int, Running]] = []
    next_index = printed = 0

    def finish(index: int, job: Running) -> None:
        nonlocal steps_total
        outcome = job.result()
        statuses[outcome.status] += 1
        per_family[job.case.family] += 1
        steps_total += len(job.case.steps)
        if outcome.failed:
            sig = signature(job.case, outcome)
            failures.setdefault(sig, []).append((index, job.case, outcome))
            print(
                f"[{index}] FAILED {outcome.status} ({job.case.family}): {outcome.message.splitlines()[0][:200] if outcome.message else ''}",
                flush=True,
            )

    while next_index < args.examples or running:
        while len(running) < max(1, args.jobs) and next_index < args.examples:
            ch = RandomChooser(random.Random(f"{args.seed}-{next_index}"))
            try:
                case = draw_case(ch, args.family, args.known_bugs, args.target)
            except Exception as e:  # noqa: BLE001 - a bug in the fuzzer itself: say so, go on
                statuses["generator-error"] += 1
                print(
                    f"[{next_index}] the generator failed: {type(e).__name__}: {e}\n{traceback.format_exc()}",
                    flush=True,
                )
                next_index += 1
                continue
            running.append((next_index, start(case, timeout=args.timeout)))
            next_index += 1
        if not running:
            continue
        wait(
            [job.conn for _, job in running] + [job.process.sentinel for _, job in running],
            timeout=1.0,
        )
        for item in [item for item in running if item[1].ready()]:
            running.remove(item)
            finish(*item)
        done = sum(statuses.values())
        if done // 100 > printed // 100 or (done == args.examples and printed != done):
            _progress(done, args.examples, began, statuses)
            printed = done

    elapsed = time.time() - began
    print(
        f"\n{sum(statuses.values())} examples in {elapsed:.0f} s ({elapsed / max(1, sum(statuses.values())):.2f} s each), "
        f"{steps_total} schedule steps; seed {args.seed}; target {args.target}"
    )
    print("outcomes: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    print("families: " + ", ".join(f"{k}={v}" for k, v in sorted(per_family.items())))
    failed = sum(len(v) for v in failures.values())
    print(f"{failed} failing example(s), {len(failures)} distinct kind(s)")
    if KNOWN_BUGS and not args.known_bugs:
        print(
            f"(not drawn: cases hitting the known bugs {', '.join(KNOWN_BUGS)}; --known-bugs draws them)"
        )
    for k, (sig, items) in enumerate(failures.items()):
        index, case, outcome = items[0]
        print(f"\n== {sig}: {len(items)} example(s), first #{index}")
        if k >= args.max_reports:
            continue
        if not args.no_shrink:
            case, outcome = shrink(case, outcome, lambda c: run_isolated(c, timeout=args.timeout))
        text = report(case, outcome)
        print(text)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, f"fuzz_failure_{k}.py"), "w") as f:
                f.write(text)
    return 1 if failures or statuses["generator-error"] else 0


def _progress(done: int, total: int, began: float, statuses: Counter) -> None:
    elapsed = time.time() - began
    bad = sum(v for k, v in statuses.items() if k not in ("ok", "invalid"))
    print(f"[{done}/{total}] {elapsed:.0f} s, {bad} failing", flush=True)


if __name__ == "__main__":
    # NOTE: multiprocessing would re-run this module (as __mp_main__) in every child before its
    # case, from disk: children need nothing from here, so hide where it came from
    __spec__ = None
    __file__ = None
    sys.exit(main())
