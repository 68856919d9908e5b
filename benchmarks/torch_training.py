"""A training step (forward, loss, backward) through torch.compile: eager, Inductor and
tensorforge, interleaved in one run, on benchmarks/torch_models.py's models in train mode.

    python benchmarks/torch_training.py [--models mlp64,resnet18,gpt2] [--device cpu] [--threads 1]
                                        [--batch N] [--repeats 5] [--no-inductor] [--small]

Each step is `model(x)`, a squared-sum loss and `loss.backward()` (gradients zeroed before, no
optimizer: its update is the same element-wise work in all three). Times are the least of
`--repeats` rounds (thread time at 1 CPU thread) of a few steps each; gradients are compared with eager's (largest relative
error over the parameters). Compile time (first step) is printed beside them.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch_models import models  # benchmarks/: the script's folder is on sys.path


def step(model, x):
    for p in model.parameters():
        p.grad = None
    out = model(x)
    (out.float() ** 2).mean().backward()


def timed(model, x, steps: int) -> float:
    # at 1 CPU thread, the thread's own time: the machine's other load counts less
    clock = (
        time.thread_time if not x.is_cuda and torch.get_num_threads() == 1 else time.perf_counter
    )
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    sync()
    start = clock()
    for _ in range(steps):
        step(model, x)
    sync()
    return (clock() - start) / steps


def gradient_error(model, reference) -> float:
    worst = 0.0
    for got, want in zip(model.parameters(), reference.parameters()):
        scale = want.grad.abs().max().item() or 1.0
        worst = max(worst, (got.grad - want.grad).abs().max().item() / scale)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp64,resnet18,gpt2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=0, help="first dimension (0: the model's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--small", action="store_true", help="the test sizes (a quick check)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tensorforge.graph import backend  # (the entry point's function: a source tree too)

    table = models(small=args.small)
    print(f"{'model':10} {'eager ms':>9} {'ind ms':>8} {'tf ms':>8} {'tf/eager':>8} "
          f"{'tf/ind':>7} {'compile s':>9} {'grad err':>9}")  # fmt: skip
    for name in args.models.split(","):
        make, shape = table[name]
        torch.manual_seed(0)
        eager = make().train().to(args.device)
        shape = (args.batch or shape[0], *shape[1:])
        x = torch.randn(shape, device=args.device)
        ours = torch.compile(copy.deepcopy(eager), backend=backend)
        start = time.perf_counter()
        step(ours, x)
        compile_s = time.perf_counter() - start
        step(eager, x)
        error = gradient_error(ours, eager)
        runs = {"eager": eager, "tf": ours}
        if not args.no_inductor:
            runs["ind"] = torch.compile(copy.deepcopy(eager))
            step(runs["ind"], x)
        steps = 3 if name == "resnet18" else 10
        times = {k: [] for k in runs}
        for _ in range(args.repeats):
            for key, model in runs.items():
                times[key].append(timed(model, x, steps))
        ms = {k: min(v) * 1e3 for k, v in times.items()}
        ind = ms.get("ind", float("nan"))
        print(f"{name:10} {ms['eager']:9.3f} {ind:8.3f} {ms['tf']:8.3f} "
              f"{ms['eager'] / ms['tf']:8.2f} {ind / ms['tf']:7.2f} {compile_s:9.1f} {error:9.1e}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
