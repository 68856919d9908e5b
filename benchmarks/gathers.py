"""Gathers and element-wise operators the graph once ran eagerly (grid_sample, fold, max_unpool,
3-d adaptive pools, 3-d transposed convolutions, frexp, gcd, ldexp, histc, bucketize, ...),
float32 on the CPU: eager torch vs tensorforge, same process, interleaved.

    python benchmarks/gathers.py [--threads 1] [--repeats 7] [--cases grid_bilinear,fold,...]

Each repeat times both in turn (a few calls each); the best over repeats is reported (the
machine may be shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest
difference from eager (integer results: the count of elements that differ). A case slower than
eager belongs in registry.eager_on_cpu.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path


def _grid(n, h, w):
    return torch.rand(n, h, w, 2) * 2.2 - 1.1


def _unpool2d(x):
    return F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=x.shape[-2:])


def _unpool3d(x):
    m, i = F.max_pool3d(x, 2, return_indices=True)
    return F.max_unpool3d(m, i, 2, output_size=x.shape[-3:])


GRID = _grid(8, 64, 64)
GRID3 = torch.rand(4, 16, 32, 32, 3) * 2.2 - 1.1
torch.manual_seed(0)
UP3 = torch.nn.ConvTranspose3d(16, 16, 3, 2, 1, 1).eval().requires_grad_(False)
UP3_2 = torch.nn.ConvTranspose3d(32, 16, 2, 2).eval().requires_grad_(False)
BOUNDARIES = torch.linspace(-2, 2, 16)
EXPONENTS = torch.randint(-20, 20, (1024, 1024), dtype=torch.int32)
CASES = {
    "grid_bilinear": (lambda x: F.grid_sample(x, GRID, align_corners=False), (8, 16, 64, 64)),
    "grid_nearest": (
        lambda x: F.grid_sample(x, GRID, "nearest", "border", align_corners=True),
        (8, 16, 64, 64),
    ),
    "grid_bicubic": (
        lambda x: F.grid_sample(x, GRID, "bicubic", "reflection", align_corners=False),
        (8, 16, 64, 64),
    ),
    "grid3d_bilinear": (
        lambda x: F.grid_sample(x, GRID3, align_corners=False),
        (4, 16, 16, 32, 32),
    ),
    "grid3d_nearest": (
        lambda x: F.grid_sample(x, GRID3, "nearest", "reflection", align_corners=True),
        (4, 16, 16, 32, 32),
    ),
    "pdist_3": (lambda x: F.pdist(x), (2000, 3)),
    "pdist_64": (lambda x: F.pdist(x), (1000, 64)),
    "pdist_64_p1": (lambda x: F.pdist(x, 1.0), (1000, 64)),
    "pdist_17_inf": (lambda x: F.pdist(x, float("inf")), (256, 17)),
    "fold": (lambda x: F.fold(x, (64, 64), 3, padding=1), (8, 16 * 9, 64 * 64)),
    "fold_stride2": (lambda x: F.fold(x, (64, 64), 2, stride=2), (8, 32 * 4, 32 * 32)),
    "max_unpool2d": (_unpool2d, (8, 32, 64, 64)),
    "max_unpool3d": (_unpool3d, (4, 16, 16, 32, 32)),
    "adaptive_avg3d": (lambda x: F.adaptive_avg_pool3d(x, (5, 7, 7)), (4, 16, 16, 32, 32)),
    "adaptive_max3d": (lambda x: F.adaptive_max_pool3d(x, (5, 7, 7)), (4, 16, 16, 32, 32)),
    "conv_t3d_k3s2": (UP3, (2, 16, 8, 16, 16)),
    "conv_t3d_k2s2": (UP3_2, (2, 32, 8, 16, 16)),
    "bucketize_16": (lambda x: torch.bucketize(x, BOUNDARIES), (1024, 1024)),
    "searchsorted_rows": (
        lambda x: torch.searchsorted(x[:, :32].contiguous().sort(-1).values, x, right=True),
        (1024, 1024),
    ),
    "ldexp": (lambda x: torch.ldexp(x, EXPONENTS), (1024, 1024)),
    "histc_16": (lambda x: torch.histc(x, 16, -2, 2), (1024, 1024)),
    "histc_100": (lambda x: torch.histc(x, 100, -3, 3), (1024, 1024)),
    "histc_1000": (lambda x: torch.histc(x, 1000, -3, 3), (1024, 1024)),
    "histc_data_100": (lambda x: torch.histc(x, 100), (1024, 1024)),
    "histc_data_16": (lambda x: torch.histc(x, 16), (1024, 1024)),
}


def main() -> None:
    args = arguments(CASES, kernels=True)

    def setup(name):
        fn, shape = CASES[name]
        return fn, (torch.randn(shape),)

    run(args, setup)


if __name__ == "__main__":
    main()
