"""Scans (cumsum, cumprod, cummax with indices, logcumsumexp) over rows, float32: eager torch vs
tensorforge, same process, interleaved.

    python benchmarks/scans.py [--threads 1] [--repeats 7] [--cases cumsum_4099,cummax_4096,...]
        [--kernels]  (tensorforge's kernels even for operators run eagerly on CPU targets)

Each repeat times both in turn (a few calls each); the best over repeats is reported (the
machine may be shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest
difference from eager (indices: the count of positions that differ).
"""

from __future__ import annotations

import argparse
import os

import torch
from torch_models import time_calls  # benchmarks/: the script's folder is on sys.path

CASES = {
    "cumsum_4099": (lambda x: x.cumsum(-1), (64, 4099)),
    "cumsum_4096": (lambda x: x.cumsum(-1), (64, 4096)),
    "cumsum_dim0": (lambda x: x.cumsum(0), (4099, 64)),
    "cumprod_4096": (lambda x: (x * 1e-3 + 1).cumprod(-1), (64, 4096)),
    "cummax_4096": (lambda x: x.cummax(-1), (64, 4096)),
    "cummax_4099": (lambda x: x.cummax(-1), (64, 4099)),
    "cummin_short": (lambda x: x.cummin(-1), (4096, 50)),
    "logcumsumexp_4096": (lambda x: torch.logcumsumexp(x, -1), (64, 4096)),
    "logcumsumexp_4099": (lambda x: torch.logcumsumexp(x, -1), (64, 4099)),
}


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--kernels", action="store_true", help="ignore registry.EAGER_ON_CPU")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["TF_NUM_THREADS"] = str(args.threads)  # tensorforge's kernels' threads
    import tensorforge  # noqa: F401  (registers the backend)
    from tensorforge.graph import registry

    if args.kernels:
        registry.EAGER_ON_CPU.clear()

    print(f"{'case':18} {'eager ms':>9} {'tf ms':>9} {'eager/tf':>9} {'diff':>9}")
    for name in args.cases.split(","):
        fn, shape = CASES[name]
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(shape)
        compiled = torch.compile(fn, backend="tensorforge")
        diff = difference(compiled(x), fn(x))
        eager, ours = [], []
        for _ in range(args.repeats):
            eager.append(time_calls(fn, x, 3))
            ours.append(time_calls(compiled, x, 3))
        e, t = min(eager) * 1e3, min(ours) * 1e3
        print(f"{name:18} {e:9.3f} {t:9.3f} {e / t:9.2f} {diff:9.1e}")


if __name__ == "__main__":
    main()
