"""Tuner quality: XGBTuner against RandomTuner on float32 matmul (512³ by default) on this CPU.

For each seed, RandomTuner measures `--random-trials` configs (1000) and XGBTuner `--xgb-trials`
(200) of the built-in matmul template (ops.matmul's knobs: 76800 configs at 512³ on AVX2).
The reference is the best throughput that the random runs find (the best over seeds).
Reported per tuner and seed:

- trials-to-90%: trials until the best so far reaches 90% of the reference;
- best after 200 trials (GFLOP/s, and as a share of the reference);
- the share of the tuner's wall time spent building and measuring (the rest is the tuner's own).

Each run logs to `--log-dir` and resumes from its log, so an interrupted benchmark continues
where it stopped (`--fresh` starts over). One JSON line per run with `--json`.

    python benchmarks/tuning.py                       # the full benchmark (hours on 2 cores)
    python benchmarks/tuning.py --size 256 --random-trials 300 --xgb-trials 120 --seeds 0
    python benchmarks/tuning.py --cuda --xgb-trials 64    # on a GPU machine: builtin/matmul_cuda
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time

from tensorforge import tune


def run_one(
    kind: str,
    seed: int,
    task,
    trials: int,
    option,
    log_dir: str,
    fresh: bool,
    quiet: bool,
    report_only: bool = False,
) -> dict:
    """Tune (or resume) one run; returns its trial-by-trial costs and timings."""
    log = os.path.join(log_dir, f"{kind}_seed{seed}.jsonl")
    meta_path = log + ".time.json"
    if fresh:
        for path in (log, meta_path):
            if os.path.exists(path):
                os.remove(path)
    meta = {"time_total": 0.0, "time_measure": 0.0}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
    tuner = tune.XGBTuner(task, seed=seed) if kind == "xgb" else tune.RandomTuner(task, seed=seed)
    done = 0
    if os.path.exists(log):
        done = len(tune.load_records(log)) if report_only else tuner.load_history(log)
    if done < trials and not report_only:
        callbacks = [tune.log_to_file(log)]
        if not quiet:
            callbacks.append(tune.progress_bar(prefix=f"{kind} seed {seed} "))
        try:
            tuner.tune(trials - done, option, callbacks=callbacks)
        finally:
            meta["time_total"] += tuner.time_total
            meta["time_measure"] += tuner.time_measure
            with open(meta_path, "w") as f:
                json.dump(meta, f)
    key = task.key
    records = [r for r in tune.load_records(log) if r.key == key][:trials]
    return {
        "tuner": kind,
        "seed": seed,
        "costs": [r.cost for r in records],
        "errors": sum(1 for r in records if not r.result.ok),
        "time_total": meta["time_total"],
        "time_measure": meta["time_measure"],
    }


def best_so_far(costs: list[float]) -> list[float]:
    out, best = [], math.inf
    for c in costs:
        best = min(best, c)
        out.append(best)
    return out


def trials_to(costs: list[float], target_cost: float) -> int | None:
    for i, c in enumerate(best_so_far(costs)):
        if c <= target_cost:
            return i + 1
    return None


def run_cuda(options) -> int:
    """Tune builtin/matmul_cuda, then check the best config and time it against the default."""
    import numpy as np

    import tensorforge as tf

    n = options.size
    task = tune.create_task("builtin/matmul_cuda", [n, n, n, "float32"], "cuda")
    print(
        f"float32 matmul {n}³ on {task.target}: {len(task.config_space)} configs", file=sys.stderr
    )
    print(task.config_space, file=sys.stderr)
    os.makedirs(options.log_dir, exist_ok=True)
    log = os.path.join(options.log_dir, f"cuda_xgb_seed{options.seeds[0]}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    try:
        tuner = tune.XGBTuner(task, seed=options.seeds[0])
    except tune.TuneError:
        tuner = tune.RandomTuner(task, seed=options.seeds[0])
    option = tune.measure_option(
        number=options.number,
        repeat=options.repeat,
        timeout=options.timeout,
        check_correctness=True,
    )
    callbacks = [tune.log_to_file(log)] + ([] if options.quiet else [tune.progress_bar()])
    tuner.tune(options.xgb_trials, option, callbacks=callbacks)
    records = tune.load_records(log)
    errors = {}
    for r in records:
        if not r.result.ok:
            errors[r.result.error_no] = errors.get(r.result.error_no, 0) + 1

    # Only now does this process touch the GPU (the candidates ran in their own processes).
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    dev = tf.cuda(0)
    a_dev, b_dev = tf.nd.array(a, dev), tf.nd.array(b, dev)
    results = {}
    for name, context in (("default", None), ("tuned", tune.apply_history_best(log))):
        with tf.Target(task.target):
            if context is None:
                s, args = task.template(n, n, n, "float32")
            else:
                with context:
                    s, args = task.template(n, n, n, "float32")
            mod = tf.build(s, args, target=task.target)
        c = tf.nd.empty((n, n), "float32", dev)
        mod(a_dev, b_dev, c)
        err = float(np.abs(c.numpy() - a @ b).max())
        seconds = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=5)(
            a_dev, b_dev, c
        ).median
        results[name] = {
            "ms": seconds * 1e3,
            "gflops": task.flop / seconds / 1e9,
            "max_abs_err": err,
        }
    line = {
        "benchmark": "tuning_cuda",
        "size": n,
        "target": task.target,
        "trials": len(records),
        "errors": {str(k): v for k, v in errors.items()},
        "best_config": tuner.best_config.to_json() if tuner.best_config else None,
        "measure_fraction": tuner.measure_fraction,
        "wall_s": tuner.time_total,
        **{f"{k}_{m}": v for k, d in results.items() for m, v in d.items()},
        "speedup": results["default"]["ms"] / results["tuned"]["ms"],
    }
    print(json.dumps(line))
    correct = all(d["max_abs_err"] < 1e-2 for d in results.values())
    print(
        f"default {results['default']['gflops']:.1f} GFLOP/s, tuned {results['tuned']['gflops']:.1f} GFLOP/s "
        f"({line['speedup']:.1f}x), correct: {correct}"
    )
    return 0 if correct else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=512, help="matmul N = L = M (default 512)")
    parser.add_argument("--random-trials", type=int, default=1000)
    parser.add_argument("--xgb-trials", type=int, default=200)
    parser.add_argument(
        "--at", type=int, default=200, help="report the best after this many trials"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tuners", nargs="+", default=["random", "xgb"], choices=["random", "xgb"])
    parser.add_argument("--number", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=10)
    parser.add_argument(
        "--parallel", action="store_true", help="parallel outer loop (default: one thread)"
    )
    parser.add_argument("--log-dir", default="tuning_bench_logs")
    parser.add_argument("--fresh", action="store_true", help="ignore existing logs")
    parser.add_argument("--json", action="store_true", help="one JSON line per run")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--report-only", action="store_true", help="only report what the logs hold")
    parser.add_argument(
        "--n-parallel", type=int, default=None, help="parallel builds (default: cores)"
    )
    parser.add_argument(
        "--cuda", action="store_true", help="tune builtin/matmul_cuda on the GPU instead"
    )
    options = parser.parse_args(argv)
    # `timeout` stops a run with SIGTERM: exit through the finally blocks that save its timings
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if options.cuda:
        return run_cuda(options)

    n = options.size
    os.makedirs(options.log_dir, exist_ok=True)
    task = tune.create_task("builtin/matmul", [n, n, n, "float32", options.parallel], "llvm")
    option = tune.measure_option(
        number=options.number,
        repeat=options.repeat,
        timeout=options.timeout,
        n_parallel=options.n_parallel,
    )
    print(
        f"float32 matmul {n}³ on {task.target.split(' -mattr=')[0]}: {len(task.config_space)} configs",
        file=sys.stderr,
    )

    runs = []
    for kind in options.tuners:
        trials = options.random_trials if kind == "random" else options.xgb_trials
        for seed in options.seeds:
            start = time.perf_counter()
            if options.report_only and not os.path.exists(
                os.path.join(options.log_dir, f"{kind}_seed{seed}.jsonl")
            ):
                continue
            runs.append(
                run_one(
                    kind,
                    seed,
                    task,
                    trials,
                    option,
                    options.log_dir,
                    options.fresh,
                    options.quiet,
                    options.report_only,
                )
            )
            print(f"{kind} seed {seed}: {time.perf_counter() - start:.0f} s", file=sys.stderr)

    random_runs = [r for r in runs if r["tuner"] == "random"]
    reference_runs = random_runs or runs
    reference = min(min(r["costs"], default=math.inf) for r in reference_runs)
    flop = task.flop
    ref_gflops = flop / reference / 1e9 if math.isfinite(reference) else 0.0
    source = (
        f"best of {options.random_trials} random trials over seeds {options.seeds}"
        if random_runs
        else "best of all runs"
    )

    rows = []
    for r in runs:
        costs = r["costs"]
        at = best_so_far(costs[: options.at])
        best_at = at[-1] if at else math.inf
        row = {
            "tuner": r["tuner"],
            "seed": r["seed"],
            "trials": len(costs),
            "errors": r["errors"],
            "trials_to_90": trials_to(costs, reference / 0.9),
            "trials_to_95": trials_to(costs, reference / 0.95),
            f"best_gflops_at_{options.at}": flop / best_at / 1e9 if math.isfinite(best_at) else 0.0,
            f"frac_of_ref_at_{options.at}": reference / best_at if math.isfinite(best_at) else 0.0,
            "best_gflops": flop / min(costs) / 1e9 if costs else 0.0,
            "measure_fraction": r["time_measure"] / r["time_total"] if r["time_total"] else None,
            "wall_s": r["time_total"],
        }
        rows.append(row)
        if options.json:
            print(
                json.dumps(
                    {"benchmark": "tuning", "size": n, "reference_gflops": ref_gflops, **row}
                )
            )

    print(f"\nreference: {ref_gflops:.2f} GFLOP/s ({source})")
    header = f"{'tuner':7s} {'seed':>4s} {'trials':>6s} {'errors':>6s} {'to 90%':>7s} {'to 95%':>7s} {'best@' + str(options.at):>10s} {'of ref':>7s} {'best':>8s} {'measure':>8s} {'wall s':>7s}"
    print(header)
    print("-" * len(header))
    fmt = lambda v: "-" if v is None else str(v)
    for row in rows:
        frac = row["measure_fraction"]
        print(
            f"{row['tuner']:7s} {row['seed']:>4d} {row['trials']:>6d} {row['errors']:>6d} "
            f"{fmt(row['trials_to_90']):>7s} {fmt(row['trials_to_95']):>7s} "
            f"{row[f'best_gflops_at_{options.at}']:>10.2f} {row[f'frac_of_ref_at_{options.at}']:>7.1%} "
            f"{row['best_gflops']:>8.2f} {('-' if frac is None else f'{frac:.1%}'):>8s} {row['wall_s']:>7.0f}"
        )
    for kind in options.tuners:
        mine = [r for r in rows if r["tuner"] == kind]
        reach = [r["trials_to_90"] for r in mine]
        reached = [x for x in reach if x is not None]
        mean = sum(reached) / len(reached) if reached else None
        print(
            f"{kind}: trials-to-90% {reach} (mean of those reaching it: {fmt(None if mean is None else round(mean, 1))})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
