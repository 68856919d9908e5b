"""How long `torch.compile(model, backend="tensorforge")(x)` takes in a fresh process: the first
compile (empty cache) and compiles from the disk cache, with where the time goes.

    python benchmarks/compile_time.py [--model resnet18] [--device cpu] [--runs 3] [--threads 1]
                                      [--baselines eager,aot_eager] [--jobs 1,2]

`--model`: one of benchmarks/torch_models.py's, or tv:<name>, a torchvision classifier
(torch_zoo.py's: randomly initialized, batch 1), where torchvision is importable.

Each run is a new Python process that imports torch and tensorforge, builds the model, then
times the first call of the compiled model (what a user waits for). The first run uses an empty
cache folder; the later ones find what it wrote. The breakdown: `dynamo` (importing and tracing:
the time outside the backend), `aot` (AOTAutograd, where it ran), `lower` (the ATen graph to
kernels' programs, weights folded), `kernels` (loading or building them), `front` (the first-
level entry: key, read, graph rebuilt), `store` (writing the compiled graph's entry, part of
`kernels`'s first run). `--jobs` times the first compile once per TENSORFORGE_BUILD_JOBS value
(the processes building kernels: runtime/build_workers.py), alternating, `--runs` rounds, each
with an empty cache (no later runs then). `--baselines` also times Dynamo's own backends the same
way: "eager" is Dynamo alone, "aot_eager" Dynamo and AOTAutograd. Timings come with the
machine's load average.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time


def child(args) -> None:
    import torch

    import tensorforge  # noqa: F401

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_models import models

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model.startswith("tv:"):
        from torch_zoo import torchvision_case

        make, inputs = torchvision_case(args.model[3:], 1)
        (x,) = inputs()
    else:
        make, shape = models(small=False)[args.model]
        x = torch.randn(*shape)
    model = make().eval().to(args.device)
    x = x.to(args.device)
    spent: dict[str, float] = {}
    if args.backend != "tensorforge":
        with torch.no_grad():
            start = time.perf_counter()
            torch.compile(model, backend=args.backend)(x)
            if x.is_cuda:
                torch.cuda.synchronize()
            print("ROW " + json.dumps({"total": time.perf_counter() - start}))
        return

    def timed(module: str, name: str, label: str, owner=None) -> None:
        owner = owner or importlib.import_module(module)
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - start

        setattr(owner, name, wrapper)

    graph = "tensorforge.graph."
    timed(graph + "backend", "_through_aot", "aot+")  # (the AOT path holds lower and kernels)
    timed(graph + "front_cache", "front_key", "front")
    timed(graph + "front_cache", "load", "front")
    lowerer = importlib.import_module(graph + "lowerer")
    timed("", "run", "lower", owner=lowerer.Lowerer)
    timed(graph + "cache", "load", "kernels")
    timed(graph + "backend", "build_kernels", "kernels")
    timed(graph + "cache", "store", "store")
    backend_module = importlib.import_module(graph + "backend")
    timed("", "backend", "backend", owner=backend_module)
    with torch.no_grad():
        start = time.perf_counter()
        torch.compile(model, backend=backend_module.backend)(x)
        if x.is_cuda:
            torch.cuda.synchronize()
        total = time.perf_counter() - start
    from tensorforge.graph import cache, front_cache

    row = {
        "total": total,
        "dynamo": total - spent.get("backend", 0.0),
        "aot": max(
            0.0, spent.get("aot+", 0.0) - spent.get("lower", 0.0) - spent.get("kernels", 0.0)
        )
        if "aot+" in spent
        else 0.0,
        **{k: spent.get(k, 0.0) for k in ("lower", "kernels", "front", "store")},
        "front_hit": front_cache.STATS.hits,
        "graph_hit": cache.STATS.hits,
    }
    print("ROW " + json.dumps(row))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--runs", type=int, default=3, help="fresh processes (the first fills)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=None, help="default: a new temporary folder")
    parser.add_argument("--baselines", default="", help="e.g. eager,aot_eager")
    parser.add_argument("--jobs", default="", help="e.g. 1,2: first compiles, alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="tensorforge", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    folder = args.cache_dir or tempfile.mkdtemp(prefix="tensorforge-compile-time-")
    env = {**os.environ, "TENSORFORGE_CACHE": "1", "TENSORFORGE_CACHE_DIR": folder}
    env["TF_NUM_THREADS"] = str(args.threads)
    command = [sys.executable, os.path.abspath(__file__), "--child", "--model", args.model]
    command += ["--device", args.device, "--threads", str(args.threads)]
    print(f"{args.model} on {args.device}, {args.threads} thread(s), cache {folder}")
    print(f"{'run':>4} {'total s':>8} {'dynamo':>7} {'aot':>6} {'lower':>6} {'kernels':>8}", end="")
    print(f" {'store':>6} {'front':>6} {'hits (front, graph)':>20} {'load avg':>9}")
    jobs = [j for j in args.jobs.split(",") if j]
    runs = [(run, j) for run in range(args.runs) for j in jobs] or [
        (r, "") for r in range(args.runs)
    ]
    for run, j in runs:
        if j:  # a first compile, of an empty cache
            env["TENSORFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tensorforge-compile-time-")
            env["TENSORFORGE_BUILD_JOBS"] = j
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        rows = [ln for ln in result.stdout.splitlines() if ln.startswith("ROW ")]
        if result.returncode != 0 or not rows:
            print(result.stderr[-3000:])
            return 1
        r = json.loads(rows[-1][4:])
        load = os.getloadavg()[0]
        label = f"{run}j{j}" if j else str(run)
        print(f"{label:>4} {r['total']:>8.2f} {r['dynamo']:>7.2f} {r['aot']:>6.2f}", end="")
        print(
            f" {r['lower']:>6.2f} {r['kernels']:>8.2f} {r['store']:>6.2f} {r['front']:>6.3f}",
            end="",
        )
        print(f" {str((r['front_hit'], r['graph_hit'])):>20} {load:>9.2f}")
    for name in [b for b in args.baselines.split(",") if b]:
        result = subprocess.run(
            [*command, "--backend", name], env=env, capture_output=True, text=True, check=False
        )
        rows = [ln for ln in result.stdout.splitlines() if ln.startswith("ROW ")]
        if result.returncode != 0 or not rows:
            print(result.stderr[-3000:])
            return 1
        total = json.loads(rows[-1][4:])["total"]
        print(f"backend={name}: {total:.2f} s (load avg {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
