"""Search quality of the auto-scheduler (`benchmarks/auto_schedule.py --search-quality N`):
the model-guided search (N/2 trials; with and without the first guess in its first batch)
against random search (N trials) on one GEMM, per seed, kernels timed in thread CPU time; a
hit where the guided search reaches 90% of random's best speed in at most half the trials
random needs. Runs from auto_schedule.py, whose GEMM workload it takes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time

from tensorforge import tune
from tensorforge.tune import auto

SEARCH_QUALITY_MODES = {  # name -> tune() options
    "guided": {"model": True, "first_guess": True},  # what task.tune does
    # no first guess: the first batch the best of random samples by the analytic prior
    "guided_cold": {"model": True, "first_guess": False},
    "random": {"model": False, "first_guess": False},
    # variants of the cold start (not in the default modes): the shortlist lowered (in the
    # measurement processes) and ranked by the IR model too, always (the default before the
    # prior), for the first 128 or 64 trials, with a shorter shortlist, a smaller population;
    # more random draws; local mutants of the fastest
    "cold_ir": {"model": True, "first_guess": False, "lower_shortlist": True},
    "cold_ir128": {"model": True, "first_guess": False, "lower_shortlist": 128},
    "cold_ir64": {"model": True, "first_guess": False, "lower_shortlist": 64},
    "guided_ir": {"model": True, "first_guess": True, "lower_shortlist": True},
    "cold_ir15": {"model": True, "first_guess": False, "lower_shortlist": True, "shortlist": 1.5},
    "cold_ir_small": {
        "model": True,
        "first_guess": False,
        "lower_shortlist": True,
        "population": 48,
        "generations": 3,
    },
    "cold_eps25": {"model": True, "first_guess": False, "epsilon": 0.25},
    "cold_local25": {"model": True, "first_guess": False, "local": 0.25},
}


def cpu_time_runner(task, mod, option, reference) -> list[float]:
    """tuning.warm_runner timed in this thread's CPU time (TF_NUM_THREADS=1: the kernel runs in
    the calling thread), so time the OS gives the other processes of a shared machine is not
    counted."""
    from tensorforge.tune.measure import check_outputs, device_arrays, make_host_arrays, to_numpy

    _, arrays = device_arrays(task, make_host_arrays(task.arg_specs))
    function = mod[getattr(mod, "entry_name", None) or "main"]
    function(*arrays)
    if reference is not None:
        check_outputs(task.arg_specs, [to_numpy(a) for a in arrays], reference)
    costs = []
    for _ in range(option.repeat):
        start = time.thread_time()
        for _ in range(option.number):
            function(*arrays)
        costs.append((time.thread_time() - start) / option.number)
    return costs


def search_quality(
    gemm, trials: int, args: tuple, modes: list[str], seeds: list[int], out: str | None
) -> list[dict]:
    """Best time after each trial on the GEMM workload `gemm` at `args`: random search with `trials` trials, the
    model-guided ones with half as many, in batches of 16, per seed; kernels timed in thread
    CPU time. Each finished run is appended to `out` (JSON lines) as it lands."""
    task = auto.SearchTask(gemm, args, "llvm")
    option = tune.measure_option(number=3, repeat=2, timeout=40, n_parallel=1)
    option = dataclasses.replace(option, runner=cpu_time_runner)
    rows = []
    for seed in seeds:
        for mode in modes:
            guided = mode != "random"
            start = time.perf_counter()
            tuner = task.tune(
                trials // 2 if guided else trials,
                log=None,
                seed=seed,
                measure_option=option,
                progress=False,
                batch_size=16,
                **SEARCH_QUALITY_MODES[mode],
            )
            curve, best = [], math.inf
            for _, res in tuner.search.history:
                best = min(best, min(res.costs) if res.ok else math.inf)
                curve.append(best)
            row = {
                "seed": seed,
                "mode": mode,
                "guided": guided,
                "args": list(args),
                "curve": curve,
                "measure_fraction": tuner.measure_fraction,
                # the lowering of screened candidates then not measured counted as search time
                "measure_fraction_strict": tuner.measure_fraction_strict,
                "wall_s": time.perf_counter() - start,
                "load": os.getloadavg()[0],
            }
            rows.append(row)
            if out:
                with open(out, "a") as f:
                    f.write(json.dumps(row) + "\n")
            print(
                f"  seed {seed} {mode}: {len(curve)} trials, best {best * 1e3:.3f} ms,"
                f" {row['wall_s']:.0f} s, measuring {row['measure_fraction']:.0%}"
                f" ({row['measure_fraction_strict']:.0%} strict), load"
                f" {row['load']:.1f}",
                flush=True,
            )
    return rows


def _strict(row: dict) -> float:
    """The measuring share counting the lowering of screened candidates that were then not
    measured as the search's time (rows from before screening: the plain share)."""
    return row.get("measure_fraction_strict", row["measure_fraction"])


def _trials_to(curve: list[float], target: float) -> int | None:
    """How many trials `curve` (best time after each) took to reach `target` seconds."""
    return next((n + 1 for n, t in enumerate(curve) if t <= target), None)


def print_search_quality(rows: list[dict]) -> None:
    """Per seed and guided mode: the target is 90% of the speed of random's best after all its
    trials; a hit when the guided search reaches it in at most half the trials random needed."""
    if not rows:
        return
    random_n = max((len(r["curve"]) for r in rows if r["mode"] == "random"), default=0)
    args = "x".join(map(str, rows[0]["args"]))
    scale = "" if random_n >= 1000 else f"REDUCED SCALE ({random_n} random trials, target 1000); "
    print(
        f"\nsearch quality, {scale}GEMM {args} (its space: > 10^5 schedules at 256³, tile"
        f" sizes alone 165² x 9): random search {random_n} trials vs model-guided {random_n // 2},"
        f" batches of 16, thread CPU time; hit: guided reaches 90% of random's best speed in at"
        f" most half the trials random needs"
    )
    hits: dict[str, int] = {}
    for seed in sorted({r["seed"] for r in rows}):
        rand = next((r for r in rows if r["seed"] == seed and r["mode"] == "random"), None)
        if rand is None or not rand["curve"] or not math.isfinite(rand["curve"][-1]):
            continue
        target = rand["curve"][-1] / 0.9  # 90% of the speed of random's best
        n_random = _trials_to(rand["curve"], target)
        for g in [r for r in rows if r["seed"] == seed and r["guided"]]:
            n_guided = _trials_to(g["curve"], target)
            hit = n_guided is not None and n_guided <= n_random / 2
            hits[g["mode"]] = hits.get(g["mode"], 0) + hit
            print(
                f"seed {seed} {g['mode']:<12}: random best {rand['curve'][-1] * 1e3:.4f} ms"
                f" ({len(rand['curve'])} trials), guided best {g['curve'][-1] * 1e3:.4f} ms"
                f" ({len(g['curve'])}); trials to 90% of random's best: guided {n_guided or '-'},"
                f" random {n_random} ({'hit' if hit else 'MISS'}); measuring"
                f" {g['measure_fraction']:.0%} ({_strict(g):.0%} strict) /"
                f" {rand['measure_fraction']:.0%} of wall time"
                f" (load {g['load']:.1f} / {rand['load']:.1f})"
            )
    for mode, n in hits.items():
        print(f"search quality, {mode}: {n} of {len({r['seed'] for r in rows})} seeds hit")
