"""Where a compiled model's time goes on CUDA: each kernel of the tensorforge graph timed alone.

    python benchmarks/graph_kernels_cuda.py [--models mlp1,mlp64,resnet18,gpt2] [--top 12]

For each model (benchmarks/torch_models.py's), compiled with backend="tensorforge": the whole
call (a CUDA graph replay) and eager torch, both with CUDA events (median of repeats); then every
kernel alone (its launch repeated, events around the loop), the largest first, with its schedule
rule, launch geometry and fused operators. Also says whether the CUDA graph path was taken and
how many nodes fell back to eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_models import models  # noqa: E402

from tensorforge.graph import program as tf_program  # noqa: E402
from tensorforge.graph.backend import backend  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402


def event_time(fn, reps: int = 20, rounds: int = 5) -> float:
    """Median over `rounds` of the mean time (seconds) of `reps` calls, by CUDA events."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times)


def profile(name: str, make, shape, top: int) -> None:
    torch.manual_seed(0)
    model = make().eval().cuda()
    x = torch.randn(*shape, device="cuda")
    captured = []
    original = tf_program.CompiledGraph.__call__

    def spy(self, args):
        if not captured:
            captured.append((self, list(args)))
        return original(self, args)

    tf_program.CompiledGraph.__call__ = spy
    try:
        with torch.no_grad():
            torch._dynamo.reset()
            fn = torch.compile(model, backend=backend)
            expected = model(x)
            got = fn(x)
            err = ((got - expected).abs().max() / expected.abs().max()).item()
            fn(x), fn(x)
            t_tf = event_time(lambda: fn(x))
            t_eager = event_time(lambda: model(x))
    finally:
        tf_program.CompiledGraph.__call__ = original
    compiled, args = captured[0]
    print(
        f"\n== {name} {tuple(shape)}: tf {t_tf * 1e3:.3f} ms, eager {t_eager * 1e3:.3f} ms, "
        f"err {err:.1e}, steps {len(compiled.steps)}, cuda graph {compiled._graph is not None}, "
        f"fallbacks {len(compiled.program.fallbacks)} {compiled.program.fallbacks[:3]}"
    )
    # every step alone, at the arguments of a real call (intermediates kept apart)
    compiled.timings, compiled.reuse = [], False
    compiled._arenas.clear()
    with torch.no_grad():
        compiled(args)
    tensors = compiled.last_tensors
    compiled.timings, compiled.reuse = None, True
    rows = []
    for step in compiled.steps:
        if not isinstance(step, BuiltKernel):
            rows.append((0.0, step.name, "EAGER", "", str(step.target)))
            continue
        raw = [tensors[p].data_ptr() if not isinstance(p, str) else 0 for p in step.plan]
        seconds = event_time(lambda step=step, raw=raw: step.call(raw))
        ex = step.executable
        geom = ""
        if hasattr(ex, "launch") and hasattr(ex, "_grid"):
            grid = tuple(int(g(raw)) for g in ex._grid)
            geom = f"{grid}x{tuple(ex.launch.block)}"
        rows.append((seconds, step.spec.name, step.source[:28], geom, ",".join(step.spec.nodes)))
    total = sum(r[0] for r in rows)
    print(f"   sum of kernels alone {total * 1e6:.1f} us ({len(rows)} steps); largest:")
    for seconds, kname, source, geom, nodes in sorted(rows, reverse=True)[:top]:
        print(f"   {seconds * 1e6:8.1f} us  {kname[:30]:30} {source:28} {geom:26} {nodes[:60]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp1,mlp64,gpt2,resnet18")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--small", action="store_true")
    args = parser.parse_args(argv)
    table = models(args.small)
    for name in args.models.split(","):
        make, shape = table[name]
        profile(name, make, shape, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
