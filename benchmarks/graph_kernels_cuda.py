"""Where a compiled model's time goes on CUDA: each kernel of the tensorforge graph timed alone.

    python benchmarks/graph_kernels_cuda.py [--models mlp1,mlp64,resnet18,gpt2] [--top 12]

For each model (benchmarks/torch_models.py's), compiled with backend="tensorforge": the whole
call (a CUDA graph replay) and eager torch, both with CUDA events (median of repeats); then every
kernel alone (REPEAT copies of it in one CUDA graph, so launch overhead stays out), the largest
first, with its schedule rule, launch geometry and fused operators; the GPU time of the whole
graph the same way, against a call of the compiled graph (the difference is host time). Also
says whether the CUDA graph path was taken and how many nodes fell back to eager.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_models import models  # noqa: E402

from tensorforge.graph import cuda_graph  # noqa: E402
from tensorforge.graph import program as tf_program  # noqa: E402
from tensorforge.graph.backend import backend  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.runtime import cuda_driver  # noqa: E402

REPEAT = 10  # copies of a kernel in the CUDA graph that times it


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
    # every step alone, at the arguments of a real call (intermediates kept apart), each timed
    # as REPEAT copies of its node in one CUDA graph: GPU time, no launch overhead
    compiled.timings, compiled.reuse = [], False
    compiled._arenas.clear()
    with torch.no_grad():
        compiled(args)
    tensors = compiled.last_tensors
    compiled.timings, compiled.reuse = None, True
    cuda_driver.activate(0)
    stream = torch.cuda.current_stream().cuda_stream
    rows, nodes, raws = [], [], []
    for step in compiled.steps:
        if not isinstance(step, BuiltKernel):
            rows.append((0.0, step.name, "EAGER", "", str(step.target)))
            continue
        raw = [tensors[p].data_ptr() if not isinstance(p, str) else 0 for p in step.plan]
        node = cuda_graph.node_of(step.executable, raw)
        nodes.append(node)
        raws.append(raw)
        graph = cuda_graph.CudaGraph([node] * REPEAT, [raw] * REPEAT)
        seconds = event_time(lambda g=graph, r=raw: g.launch([r] * REPEAT, stream)) / REPEAT
        geom = f"{node.grid}x{node.block}"
        rows.append((seconds, step.spec.name, step.source[:28], geom, ",".join(step.spec.nodes)))
    whole = cuda_graph.CudaGraph(nodes * REPEAT, raws * REPEAT)
    gpu = event_time(lambda: whole.launch(raws * REPEAT, stream), reps=3) / REPEAT
    with torch.no_grad():
        direct = event_time(lambda: compiled(args))
    print(
        f"   GPU time of the graph {gpu * 1e6:.1f} us; a call of the compiled graph "
        f"{direct * 1e6:.1f} us; through torch.compile {t_tf * 1e6:.1f} us"
    )
    total = sum(r[0] for r in rows)
    print(f"   sum of kernels {total * 1e6:.1f} us ({len(rows)} steps); largest:")
    for seconds, kname, source, geom, nodes_ in sorted(rows, reverse=True)[:top]:
        print(f"   {seconds * 1e6:8.1f} us  {kname[:24]:24} {source:28} {geom:28} {nodes_[:50]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp1,mlp64,gpt2,resnet18")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--small", action="store_true")
    parser.add_argument(
        "--fill", type=int, default=None, help="schedules_cuda.FILL_THREADS (products)"
    )
    args = parser.parse_args(argv)
    if args.fill:
        from tensorforge.graph import schedules_cuda

        schedules_cuda.FILL_THREADS = args.fill
    table = models(args.small)
    for name in args.models.split(","):
        make, shape = table[name]
        profile(name, make, shape, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
