"""Tuning throughput: the local runner with one worker vs a local Ray cluster, in one run.

    python benchmarks/ray_tuning.py                       # CPU: builtin/matmul, 2 Ray workers
    python benchmarks/ray_tuning.py --target cuda --trials 256 --workers 15
    python benchmarks/ray_tuning.py --only ray ...        # one side (to split a long run)
    python benchmarks/ray_tuning.py --target cuda --gpus 1,2 --trials 512 --workers 30
                                                          # 1 GPU vs 2 GPUs of this host

Both sides tune the same task with a RandomTuner of the same seed, so they measure the same
configs; the table gives trials per second, the speed-up, and each side's best re-measured in
this process on the same device (so the two bests compare fairly). One JSON line per side.
With --gpus each side is a local Ray cluster offering that many of this host's GPUs (one
measurement actor each); the table adds trials per second per GPU against the first count, and
which GPUs measured (name, clocks) from the records. --remeasure-only re-times the bests of the
logs already in --logdir (to split the sides over several runs and compare them in one).
With --auto the task is the auto-scheduler's GEMM (tune.auto, no template: a space far past 512
schedules, where builtin/matmul_cuda has 144 configs), searched at random (model=False, so every
side measures the same schedules for a seed).
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
from tensorforge import te, tune
from tensorforge.ops.matmul import product
from tensorforge.tune import auto
from tensorforge.tune.records import best_by_workload, load_records


@auto.register_workload
def ray_bench_gemm(n, m, k):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    return [A, B, product(n, m, k, lambda i, r: A[i, r], lambda r, j: B[r, j])]


def tune_once(task, trials: int, seed: int, option, log: str, before: int = 0) -> dict:
    """Tune `trials` more; the rate counts this run's trials (`before` were in the log)."""
    start = time.perf_counter()
    if isinstance(task, auto.SearchTask):
        task.tune(trials, log, seed, option, progress=False, model=False)
    else:
        tuner = tune.RandomTuner(task, seed=seed)
        tuner.tune(trials, option, callbacks=[tune.log_to_file(log)])
    wall = time.perf_counter() - start
    measured = [r for r in load_records(log) if not r.result.meta.get("confirmed")]
    ok = sum(r.result.ok for r in measured)
    new = len(measured) - before
    return {"wall_s": wall, "trials": len(measured), "ok": ok, "trials_per_s": new / wall}


def warm_workers(count: int) -> None:
    """Start every build worker and import tensorforge there, as in a cluster left standing."""
    import ray

    @ray.remote(num_cpus=1)
    def imported() -> int:
        import tensorforge.tune.ray_remote  # noqa: F401

        return os.getpid()

    ray.get([imported.remote() for _ in range(count)])


def remeasure_bests(task, logs: dict[str, str], rounds: int = 3, repeats: int = 15) -> dict:
    """Seconds per call of each log's best config, timed here on one device: every round times
    each best once (median of `repeats`), interleaved, and each keeps its fastest round."""
    dev = tf.cuda(0) if task.target_kind == "cuda" else tf.cpu(0)
    rng = np.random.default_rng(0)
    arrays = [
        tf.nd.array(rng.uniform(-1, 1, spec.shape).astype(spec.dtype), dev)
        for spec in task.arg_specs
    ]
    timers = {}
    for side, log in logs.items():
        if isinstance(task, auto.SearchTask):
            s, args = task.apply_best(log)
        else:
            (record,) = best_by_workload(load_records(log)).values()
            s, args = task.instantiate(record.config)
        mod = tf.build(s, args, target=task.target)
        timers[side] = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=repeats)
        timers[side](*arrays)  # warm: first-call costs stay out of the rounds
    best = {side: float("inf") for side in logs}
    for _ in range(rounds):
        for side, timer in timers.items():
            best[side] = min(best[side], float(np.median(timer(*arrays).results)))
    return best


def devices_seen(log: str) -> list[str]:
    """Which devices measured a log's trials: name, GPU index, trials and SM clock range."""
    seen: dict[tuple, list[float]] = {}
    counts: dict[tuple, int] = {}
    for record in load_records(log):
        meta = record.result.meta
        key = (meta.get("host", "?"), meta.get("device", "?"), meta.get("gpu_index", "-"))
        counts[key] = counts.get(key, 0) + 1
        clocks = seen.setdefault(key, [])
        if "clock_sm_mhz" in meta:
            clocks.append(meta["clock_sm_mhz"])
    lines = []
    for (host, device, index), clocks in sorted(seen.items()):
        clock = f", SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else ""
        lines.append(f"{device} #{index} on {host}: {counts[host, device, index]} records{clock}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2, help="Ray build slots (CPUs)")
    parser.add_argument("--shape", type=int, nargs=3, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=None, help="one side: local, ray, or a GPU count")
    parser.add_argument("--gpus", default=None, help="GPU counts to compare, e.g. 1,2 (cuda)")
    parser.add_argument("--remeasure-only", action="store_true")
    parser.add_argument(
        "--resume", action="store_true", help="keep a side's log and tune up to --trials in all"
    )
    parser.add_argument("--auto", action="store_true", help="the auto-scheduler's GEMM task")
    parser.add_argument("--logdir", default=None)
    parser.add_argument(
        "--min-repeat-ms",
        type=float,
        default=0.0,
        help="each repeat runs at least this long (TVM's GPU practice: 100-150 ms)",
    )
    options = parser.parse_args()

    import tensorforge.tune.builtin  # noqa: F401 - registers the built-in templates

    cuda = options.target.split()[0] == "cuda"
    shape = options.shape or ([4096] * 3 if cuda else [256] * 3)
    if options.auto:
        name = "auto/ray_bench_gemm"
        task = auto.SearchTask(func=ray_bench_gemm, args=tuple(shape), target=options.target)
    else:
        name = "builtin/matmul_cuda" if cuda else "builtin/matmul"
        task = tune.create_task(name, (*shape, "float32"), options.target)
    logdir = options.logdir or tempfile.mkdtemp(prefix="tf-ray-bench-")
    os.makedirs(logdir, exist_ok=True)
    common = {
        "number": 5 if cuda else 3,
        "repeat": 3,
        "timeout": 60 if cuda else 20,
        "min_repeat_ms": options.min_repeat_ms,
    }
    if options.gpus:
        sides = [f"{int(n)}gpu" for n in options.gpus.split(",")]
    else:
        sides = ["local", "ray"]
    if options.only:
        only = options.only if options.only in ("local", "ray") else f"{int(options.only)}gpu"
        sides = [only]
    rows = {}
    for side in sides:
        log = os.path.join(logdir, f"{side}.jsonl")
        row = {"side": side, "task": name, "shape": shape, "target": options.target.split()[0]}
        if options.remeasure_only:
            rows[side] = row
            continue
        trials, before = options.trials, 0
        if options.resume and os.path.exists(log):
            done = [r for r in load_records(log) if not r.result.meta.get("confirmed")]
            trials -= len(done)
            row["resumed_from"] = before = len(done)
        elif os.path.exists(log):
            os.remove(log)
        runner = None
        if side == "local":
            option = tune.measure_option(n_parallel=1, **common)
        else:
            gpus = int(side[:-3]) if side.endswith("gpu") else None
            runner = tune.RayRunner(
                address=None, num_cpus=options.workers, max_repeat=10, num_gpus=gpus
            )
            runner.connect(task.target)  # a standing cluster: its start-up is not tuning time
            warm_workers(options.workers)
            option = tune.measure_option(runner=runner, **common)
        row.update(tune_once(task, trials, options.seed, option, log, before))
        if runner is not None:
            runner.shutdown()
        rows[side] = row
        print(json.dumps(row), flush=True)
    logs = {side: os.path.join(logdir, f"{side}.jsonl") for side in rows}
    logs = {side: log for side, log in logs.items() if os.path.exists(log)}
    # Every side's best re-timed in this one process on one device, after all tuning.
    for side, seconds in remeasure_bests(task, logs).items():
        rows[side]["best_ms"] = seconds * 1e3
        rows[side]["best_gflops"] = task.flop / seconds / 1e9
        print(json.dumps({"side": side, "best_ms": seconds * 1e3}), flush=True)
    for side, log in logs.items():
        for line in devices_seen(log):
            print(f"{side}: {line}")
    first = next((row for row in rows.values() if "trials_per_s" in row), None)
    print(
        f"\n{'side':>6} {'trials':>7} {'wall s':>8} {'trials/s':>9} {'scaling':>8} "
        f"{'best GFLOP/s':>13} {'vs first':>9}"
    )
    for side, row in rows.items():
        if "best_gflops" not in row:
            continue
        per_s = row.get("trials_per_s")
        scaling = ""
        if per_s and first and side.endswith("gpu"):
            # against the ideal: N GPUs at N times the first count's per-GPU rate
            n, n0 = int(side[:-3]), int(first["side"][:-3])
            scaling = f"{per_s / (first['trials_per_s'] * n / n0):.2f}"
        base = rows[sides[0]].get("best_gflops")
        gap = f"{(row['best_gflops'] / base - 1) * 100:+.1f}%" if base else ""
        print(
            f"{side:>6} {row.get('trials', '-'):>7} {row.get('wall_s', float('nan')):>8.1f} "
            f"{per_s or float('nan'):>9.3f} {scaling:>8} {row['best_gflops']:>13.1f} {gap:>9}"
        )
    if first and not options.gpus and len(rows) == 2:
        local, ray_row = rows.values()
        speedup = ray_row["trials_per_s"] / local["trials_per_s"]
        print(f"Ray / local trials per second: {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
