"""Scans (cumsum, cumprod, cummax with indices, logcumsumexp) over rows, float32: eager torch vs
tensorforge, same process, interleaved.

    python benchmarks/scans.py [--threads 1] [--repeats 7] [--cases cumsum_4099,cummax_4096,...]
        [--kernels]  (tensorforge's kernels even for operators run eagerly on CPU targets)

Each repeat times both in turn (a few calls each); the best over repeats is reported (the
machine may be shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest
difference from eager (indices: the count of positions that differ).
"""

from __future__ import annotations

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path

CASES = {
    "cumsum_4099": (lambda x: x.cumsum(-1), (64, 4099)),
    "cumsum_4096": (lambda x: x.cumsum(-1), (64, 4096)),
    "cumsum_dim0": (lambda x: x.cumsum(0), (4099, 64)),
    "cumprod_4096": (lambda x: (x * 1e-3 + 1).cumprod(-1), (64, 4096)),
    "cummax_4096": (lambda x: x.cummax(-1), (64, 4096)),
    "cummax_4099": (lambda x: x.cummax(-1), (64, 4099)),
    "cummin_short": (lambda x: x.cummin(-1), (4096, 50)),
    "cummax_dim0": (lambda x: x.cummax(0), (4096, 50)),
    "logcumsumexp_4096": (lambda x: torch.logcumsumexp(x, -1), (64, 4096)),
    "logcumsumexp_4099": (lambda x: torch.logcumsumexp(x, -1), (64, 4099)),
}


def main() -> None:
    args = arguments(CASES, kernels=True)

    def setup(name):
        fn, shape = CASES[name]
        return fn, (torch.randn(shape),)

    run(args, setup)


if __name__ == "__main__":
    main()
