"""Tuning throughput: the local runner with one worker vs a local Ray cluster, in one run.

    python benchmarks/ray_tuning.py                       # CPU: builtin/matmul, 2 Ray workers
    python benchmarks/ray_tuning.py --target cuda --trials 256 --workers 15
    python benchmarks/ray_tuning.py --only ray ...        # one side (to split a long run)

Both sides tune the same task with a RandomTuner of the same seed, so they measure the same
configs; the table gives trials per second, the speed-up, and each side's best re-measured in
this process on the same device (so the two bests compare fairly). One JSON line per side.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

import tensorforge as tf
from tensorforge import tune
from tensorforge.tune.records import best_by_workload, load_records


def tune_once(task, trials: int, seed: int, option, log: str) -> dict:
    tuner = tune.RandomTuner(task, seed=seed)
    start = time.perf_counter()
    tuner.tune(trials, option, callbacks=[tune.log_to_file(log)])
    wall = time.perf_counter() - start
    measured = [r for r in load_records(log) if not r.result.meta.get("confirmed")]
    ok = sum(r.result.ok for r in measured)
    return {"wall_s": wall, "trials": len(measured), "ok": ok, "trials_per_s": len(measured) / wall}


def remeasure_best(task, log: str, repeats: int = 15) -> float:
    """Seconds per call of the log's best config, timed here (median of `repeats`)."""
    (record,) = best_by_workload(load_records(log)).values()
    s, args = task.instantiate(record.config)
    mod = tf.build(s, args, target=task.target)
    dev = tf.cuda(0) if task.target_kind == "cuda" else tf.cpu(0)
    rng = np.random.default_rng(0)
    arrays = [
        tf.nd.array(rng.uniform(-1, 1, spec.shape).astype(spec.dtype), dev)
        for spec in task.arg_specs
    ]
    timer = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=repeats)
    timer(*arrays)
    return float(np.median(timer(*arrays).results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="Ray build slots (CPUs)")
    parser.add_argument("--shape", type=int, nargs=3, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=["local", "ray"], default=None)
    parser.add_argument("--logdir", default=None)
    options = parser.parse_args()

    import tensorforge.tune.builtin  # noqa: F401 - registers the built-in templates

    cuda = options.target.split()[0] == "cuda"
    name = "builtin/matmul_cuda" if cuda else "builtin/matmul"
    shape = options.shape or ([4096] * 3 if cuda else [256] * 3)
    task = tune.create_task(name, (*shape, "float32"), options.target)
    logdir = options.logdir or tempfile.mkdtemp(prefix="tf-ray-bench-")
    os.makedirs(logdir, exist_ok=True)
    common = {"number": 5 if cuda else 3, "repeat": 3, "timeout": 60 if cuda else 20}
    rows = []
    sides = [options.only] if options.only else ["local", "ray"]
    for side in sides:
        log = os.path.join(logdir, f"{side}.jsonl")
        if os.path.exists(log):
            os.remove(log)
        if side == "local":
            option = tune.measure_option(n_parallel=1, **common)
        else:
            runner = tune.RayRunner(address=None, num_cpus=options.workers, max_repeat=10)
            runner.connect(task.target)  # a standing cluster: its start-up is not tuning time
            option = tune.measure_option(runner=runner, **common)
        row = {"side": side, "task": name, "shape": shape, "target": options.target.split()[0]}
        row.update(tune_once(task, options.trials, options.seed, option, log))
        if side == "ray":
            runner.shutdown()
        best = remeasure_best(task, log)
        row["best_ms"] = best * 1e3
        row["best_gflops"] = task.flop / best / 1e9
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'side':>6} {'trials':>7} {'wall s':>8} {'trials/s':>9} {'best GFLOP/s':>13}")
    for row in rows:
        print(
            f"{row['side']:>6} {row['trials']:>7} {row['wall_s']:>8.1f} "
            f"{row['trials_per_s']:>9.3f} {row['best_gflops']:>13.1f}"
        )
    if len(rows) == 2:
        local, ray_row = rows
        speedup = ray_row["trials_per_s"] / local["trials_per_s"]
        gap = ray_row["best_gflops"] / local["best_gflops"] - 1
        print(f"Ray / local trials per second: {speedup:.2f}x; best differs by {gap * 100:+.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
