"""Row operators under symbolic sizes: eager torch vs tensorforge static vs tensorforge dynamic.

    python benchmarks/torch_dynamic.py [--cases softmax64,softmax_vit,ln197,ln64,gpt2,mlp64]
                                       [--threads 1] [--repeats 7] [--json out.jsonl]
                                       [--dtype bfloat16]

"static" is `torch.compile(fn, backend=tensorforge)` (the sizes of the example are constants),
"dynamic" is `torch.compile(fn, backend=tensorforge, dynamic=True)`: Dynamo makes every size
but 0 and 1 a symbol (s0, s1, ...), and one set of kernels serves every size. Each backend
compiles a function of its own (a fresh code object) with a backend callable of its own, so
Dynamo's caches keep the two apart; the dynamic one is checked to have seen symbolic sizes and
to serve another size (each size > 1 one larger) without compiling again.
Same process, interleaved: each repeat times every backend in turn, the median is reported,
with each output's relative error against eager (max abs error / max abs value).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import types

import torch
from torch import nn
from torch_models import MLP, GPT2Block, relative_error, time_calls  # benchmarks/: the folder

from tensorforge.graph import backend as tf_backend


def _softmax(x):
    return torch.softmax(x, -1)


class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        with torch.no_grad():  # not the identity's weights
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.ln(x)


# name: (make the function, input shape, whether its last size may change: a module's last
# size is its weights')
CASES = {
    "softmax64": (lambda: _softmax, (64, 1000), True),
    "softmax_vit": (lambda: _softmax, (1, 12, 197, 197), True),  # ViT-B/16 attention rows
    "ln197": (lambda: LayerNorm(768), (197, 768), False),
    "ln64": (lambda: LayerNorm(3072), (64, 3072), False),
    "gpt2": (lambda: GPT2Block(768, 12).eval(), (1, 128, 768), False),
    "mlp64": (lambda: MLP().eval(), (64, 768), False),  # matmul rows: a dynamic batch
}


def _fresh(fn):
    """`fn` as a function of a code object of its own (a module: its call, wrapped), so the
    Dynamo cache of one compiled variant is not another's."""

    def call(x):
        return fn(x)

    return types.FunctionType(call.__code__.replace(), call.__globals__, closure=call.__closure__)


def _other_shape(shape: tuple, vary_last: bool) -> tuple:
    """`shape` with each size > 1 one larger (the last only with `vary_last`): the dynamic
    kernels should serve it without a compile of its own."""
    last = len(shape) - 1
    return tuple(s + 1 if s > 1 and (k < last or vary_last) else s for k, s in enumerate(shape))


def _compiled(fn, dynamic: bool):
    """(compiled fn, list of whether each graph it compiled saw a symbolic size)."""
    saw: list[bool] = []

    def counting(gm, example_inputs, **kwargs):
        saw.append(any(isinstance(t, torch.SymInt) for t in example_inputs))  # sizes as args
        return tf_backend(gm, example_inputs, **kwargs)

    return torch.compile(_fresh(fn), backend=counting, dynamic=dynamic), saw


def run_case(name: str, repeats: int, threads: int, dtype: str = "float32") -> dict:
    make, shape, vary_last = CASES[name]
    torch.manual_seed(0)
    torch._dynamo.reset()
    fn = make()
    if isinstance(fn, nn.Module):
        fn = fn.to(getattr(torch, dtype))
    x = torch.randn(*shape).to(getattr(torch, dtype))
    row: dict = {"case": name, "shape": list(shape), "threads": threads, "dtype": dtype}
    fns = {"eager": fn}
    with torch.no_grad():
        expected = fn(x)
        for backend, dynamic in (("static", False), ("dynamic", True)):
            start = time.perf_counter()
            compiled, saw = _compiled(fn, dynamic)
            got = compiled(x)
            row[f"{backend}_compile_s"] = round(time.perf_counter() - start, 2)
            row[f"{backend}_error"] = relative_error(got, expected)
            row[f"{backend}_symbolic"] = any(saw)
            fns[backend] = compiled
            compiled(x), compiled(x)
            if dynamic:  # another size: no compile of its own if the sizes stayed symbolic
                before = len(saw)  # (Dynamo may have called the backend twice: a restart)
                compiled(torch.randn(*_other_shape(shape, vary_last)).to(x.dtype))
                row["dynamic_recompiled"] = len(saw) > before
        once = time_calls(fn, x, 1)
        calls = max(3, min(200, int(0.05 / max(once, 1e-6))))
        samples: dict[str, list[float]] = {b: [] for b in fns}
        for _ in range(repeats):
            for b, f in fns.items():
                samples[b].append(time_calls(f, x, calls))
    for b, s in samples.items():
        row[f"{b}_us"] = round(statistics.median(s) * 1e6, 1)
    row["dynamic_vs_static"] = round(row["dynamic_us"] / row["static_us"], 2)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", default=None, help="append one JSON line per case here")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)
    rows = []
    for name in args.cases.split(","):
        row = run_case(name, args.repeats, args.threads, args.dtype)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    print()
    print(
        f"{'case':12} {'shape':18} {'eager us':>9} {'static us':>10} {'dynamic us':>10}"
        f" {'dyn/static':>10} {'static err':>10} {'dyn err':>8}"
    )
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        symbolic = "" if r["dynamic_symbolic"] else " (dynamic saw no symbol!)"
        if r["dynamic_recompiled"]:
            symbolic += " (dynamic compiled again for another size: a size specialized)"
        print(
            f"{r['case']:12} {shape:18} {r['eager_us']:>9.1f} {r['static_us']:>10.1f}"
            f" {r['dynamic_us']:>10.1f} {r['dynamic_vs_static']:>10.2f}"
            f" {r['static_error']:>10.1e} {r['dynamic_error']:>8.1e}{symbolic}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
