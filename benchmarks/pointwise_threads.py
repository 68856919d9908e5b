"""Element-wise chains of transcendental functions over 1M-16M float32 elements, one row (a
vector) or a few long rows: eager torch vs tensorforge, same process, interleaved. At 2 threads
the kernel runs its rows in parallel chunks (schedules.py's _few_row_tasks); the first guess ran
the few rows in parallel, a vector's single row on one thread.

    python benchmarks/pointwise_threads.py [--threads 2] [--repeats 7] [--cases erf_4M,...]
"""

from __future__ import annotations

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path

M = 1 << 20
FUNCTIONS = {
    "erf": torch.erf,
    "exp": torch.exp,
    "tanh": torch.tanh,
    "sin": torch.sin,
    "lgamma": torch.lgamma,
    "chain": lambda x: torch.tanh(torch.erf(x) * torch.exp(-x) + torch.sin(x)),
}
SHAPES = {"1M": (M,), "4M": (4 * M,), "16M": (16 * M,), "3x1.4M": (3, 1398101)}
CASES = {f"{f}_{s}": (f, s) for f in FUNCTIONS for s in SHAPES}


def main() -> None:
    args = arguments(CASES)

    def setup(name):
        function, shape = CASES[name]
        return FUNCTIONS[function], (torch.randn(SHAPES[shape]),)

    run(args, setup)


if __name__ == "__main__":
    main()
