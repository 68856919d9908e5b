"""Per-kernel times of a compiled model on the CPU: each step's minimum and median over many
calls (the backend's `report` times only the first call), with the schedule that made it.

    python benchmarks/kernel_profile.py [--model gpt2|sdpa|mlp64] [--dtype bfloat16] [--calls 200]
                                        [--threads 1] [--dynamic] [--tokens 128]

sdpa: the GPT-2 block with its attention as F.scaled_dot_product_attention(is_causal=True).
--dynamic compiles with dynamic=True (rows or the sequence known only at run time). The steps
run as in a plain call but one by one, timed (the graph's arena reuse and call plan are off,
as under `report`), so the sum is a little above a plain call's time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch_models import MLP, GPT2Block  # benchmarks/: the folder

from tensorforge.graph import backend as tf_backend
from tensorforge.graph.program import BuiltKernel, CompiledGraph


class SdpaBlock(GPT2Block):
    """GPT-2's block, its attention one causal scaled_dot_product_attention."""

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def profile(model, x, calls: int, dynamic: bool) -> list[tuple[str, float, float, str]]:
    """(step, min us, median us, what) per step of the compiled graph(s)."""
    compiled = []  # every CompiledGraph made while this model compiles (one: strict, no breaks)
    init = CompiledGraph.__init__

    def noting(self, *args, **kwargs):
        init(self, *args, **kwargs)
        compiled.append(self)

    fn = torch.compile(model, backend=tf_backend, dynamic=dynamic)
    with torch.no_grad():
        CompiledGraph.__init__ = noting
        try:
            fn(x)
        finally:
            CompiledGraph.__init__ = init
        (graph,) = compiled
        samples = [[] for _ in graph.steps]
        for _ in range(calls):
            graph.timings, graph.reuse = [], False
            fn(x)
            for k, seconds in enumerate(graph.timings):
                samples[k].append(seconds)
        graph.timings, graph.reuse = None, True
    rows = []
    for step, times in zip(graph.steps, samples):
        if isinstance(step, BuiltKernel):
            name, what = step.spec.name, f"{step.source}: {', '.join(step.spec.nodes)}"
        else:
            name, what = step.name, f"EAGER {step.target}"
        rows.append((name, min(times) * 1e6, statistics.median(times) * 1e6, what))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=["gpt2", "sdpa", "mlp64"])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=128, help="GPT-2's sequence, MLP's rows")
    parser.add_argument("--dynamic", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    if args.model in ("gpt2", "sdpa"):
        block = GPT2Block if args.model == "gpt2" else SdpaBlock
        model, x = block(), torch.randn(1, args.tokens, 768)
    else:
        model, x = MLP(), torch.randn(args.tokens, 768)
    rows = profile(model.eval().to(dtype), x.to(dtype), args.calls, args.dynamic)
    print(f"{'step':28} {'min us':>9} {'med us':>9}  schedule / fused operators")
    for name, low, mid, what in rows:
        print(f"{name[:28]:28} {low:9.1f} {mid:9.1f}  {what[:110]}")
    total = sum(r[1] for r in rows)
    print(f"{'sum of minima':28} {total:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
