"""frexp, nextafter, gcd and lcm over 1M elements (lower_bits.py, lower_gcd.py): eager torch vs
tensorforge, same process, interleaved.

    python benchmarks/bits.py [--threads 1] [--repeats 7] [--cases frexp_f32,gcd_i64,...]
        [--kernels]  (tensorforge's kernels even for operators run eagerly on CPU targets)
"""

from __future__ import annotations

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path

N = 1 << 20


def floats(dtype, scale=100.0):
    return lambda: (torch.randn(N, dtype=torch.float32) * scale).to(dtype)


def integers(dtype, high=10**6):
    return lambda: torch.randint(-high, high, (N,), dtype=dtype)


CASES = {
    "frexp_f32": (torch.frexp, floats(torch.float32), 1),
    "frexp_f64": (torch.frexp, floats(torch.float64), 1),
    "frexp_f16": (torch.frexp, floats(torch.float16, 1.0), 1),
    "nextafter_f16": (torch.nextafter, floats(torch.float16, 1.0), 2),
    "nextafter_bf16": (torch.nextafter, floats(torch.bfloat16, 1.0), 2),
    "nextafter_f32": (torch.nextafter, floats(torch.float32, 1.0), 2),
    "gcd_i64": (torch.gcd, integers(torch.int64), 2),
    "gcd_i32": (torch.gcd, integers(torch.int32), 2),
    "gcd_i64_below_100": (torch.gcd, integers(torch.int64, 100), 2),
    "lcm_i64": (torch.lcm, integers(torch.int64), 2),
}


def main() -> None:
    args = arguments(CASES, kernels=True)

    def setup(name):
        fn, make, count = CASES[name]
        return fn, tuple(make() for _ in range(count))

    run(args, setup)


if __name__ == "__main__":
    main()
