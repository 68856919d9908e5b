"""The harness of the per-operator benchmarks (scans.py, scatters.py, gathers.py, convs_nd.py,
convs_resnet.py): each case compiled with the tensorforge backend, checked against eager torch,
then both timed in the same process, interleaved: each repeat times eager then tensorforge (a few
calls each; at 1 thread one call each, its thread CPU time, so time the machine's other work
takes from this core is not counted), the best over repeats is reported (the machine may be
shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest difference from
eager (relative to its largest value; integer results: the count of elements that differ)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence

import torch
from torch_models import time_calls  # benchmarks/: the script's folder is on sys.path


def difference(got, expected) -> float:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    worst = 0.0
    for g, e in zip(got, expected):
        if e.is_floating_point():
            scale = e.abs().max().clamp_min(1e-30)
            worst = max(worst, ((g - e).abs().max() / scale).item())
        else:
            worst = max(worst, float((g != e).sum()))
    return worst


def arguments(names: Sequence[str], kernels: bool = False) -> argparse.Namespace:
    """--threads (torch's and tensorforge's), --repeats, --cases; with `kernels`, --kernels:
    tensorforge's kernels even for operators it runs eagerly on CPU targets."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cases", default=",".join(names))
    parser.add_argument(
        "--target", default=None, help='tensorforge\'s CPU target, e.g. "llvm -mcpu=znver3"'
    )
    if kernels:
        parser.add_argument("--kernels", action="store_true", help="ignore registry.EAGER_ON_CPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)  # tensorforge's kernels' threads
    import tensorforge  # noqa: F401  (registers the backend)

    if getattr(args, "kernels", False):
        from tensorforge.graph import registry

        registry.EAGER_ON_CPU.clear()
    return args


def run(args: argparse.Namespace, setup: Callable[[str], tuple]) -> list[tuple]:
    """One row per case of args.cases: `setup(name)` -> (the function or module, its inputs),
    called after a fresh Dynamo and seed 0; returns the rows (name, eager ms, tf ms, diff)."""
    names = args.cases.split(",")
    options = {"target": args.target} if getattr(args, "target", None) else None
    rows = []
    width = max(len(n) for n in names) + 2
    print(f"{'case':{width}} {'eager ms':>9} {'tf ms':>9} {'eager/tf':>9} {'diff':>9}")
    for name in names:
        torch._dynamo.reset()  # (a model compiled after another of its class timed 5-50x slow)
        torch.manual_seed(0)
        fn, inputs = setup(name)
        e, t, diff = _compare(fn, inputs, args.repeats, options, args.threads == 1)
        print(f"{name:{width}} {e:9.3f} {t:9.3f} {e / t:9.2f} {diff:9.1e}", flush=True)
        rows.append((name, e, t, diff))
    return rows


def _compare(
    fn, inputs: tuple, repeats: int, options=None, one_thread: bool = False
) -> tuple[float, float, float]:
    """(eager ms, tensorforge ms, difference) of one case. At one thread (CPU), each call's
    thread CPU time, so time the machine's other work takes from this core is not counted."""
    with torch.no_grad():
        compiled = torch.compile(fn, backend="tensorforge", options=options)
        diff = difference(compiled(*inputs), fn(*inputs))
        eager, ours = [], []
        cpu_clock = one_thread and not inputs[0].is_cuda
        for _ in range(repeats):
            for times, call in ((eager, fn), (ours, compiled)):
                if cpu_clock:
                    start = time.thread_time()
                    call(*inputs)
                    times.append(time.thread_time() - start)
                else:
                    times.append(time_calls(lambda _, call=call: call(*inputs), inputs[0], 3))
    return min(eager) * 1e3, min(ours) * 1e3, diff
