"""Sorts (sort, argsort, topk, kthvalue, median, mode) along a dimension, values and indices: eager
torch vs tensorforge, same process, interleaved.

    python benchmarks/sorts.py [--threads 1] [--repeats 7] [--cases sort_4096,topk5_4096,...]
        [--kernels]  (tensorforge's kernels even for operators run eagerly on CPU targets)
    SORTS_DEVICE=cuda BLOCK_SORT_LINE=2048 python benchmarks/sorts.py --target cuda --cases ...
        (the GPU; lines past 64 sorted by a CUDA block each, lower_sort.BLOCK_SORT_LINE)

Each repeat times both in turn (a few calls each); the best over repeats is reported (the
machine may be shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest
difference from eager (indices: the count of positions that differ; among equal values topk,
kthvalue and median may pick another index, which random floats make rare).
"""

from __future__ import annotations

import os

import torch
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path


def integers(shape):
    return torch.randint(-1000, 1000, shape)


def with_nans(shape):  # (a tenth NaN)
    x = torch.randn(shape)
    return x.masked_fill(torch.rand(shape) < 0.1, float("nan"))


CASES = {
    "sort_4096": (lambda x: x.sort(-1), (64, 4096), torch.randn),
    "sort_stable_descending": (
        lambda x: x.sort(dim=-1, stable=True, descending=True),
        (64, 4096),
        torch.randn,
    ),
    "sort_short": (lambda x: x.sort(-1), (4096, 50), torch.randn),
    "sort_16": (lambda x: x.sort(-1), (4096, 16), torch.randn),
    "sort_dim0": (lambda x: x.sort(0), (4096, 50), torch.randn),
    "sort_int64": (lambda x: x.sort(-1), (64, 4096), integers),
    "sort_65536": (lambda x: x.sort(-1), (16, 65536), torch.randn),
    "argsort_4096": (lambda x: x.argsort(-1), (64, 4096), torch.randn),
    "topk5_4096": (lambda x: x.topk(5), (64, 4096), torch.randn),
    "topk5_short": (lambda x: x.topk(5), (4096, 50), torch.randn),
    "topk16_65536": (lambda x: x.topk(16), (16, 65536), torch.randn),
    "topk100_4096": (lambda x: x.topk(100), (64, 4096), torch.randn),
    "topk256_4096": (lambda x: x.topk(256), (64, 4096), torch.randn),
    "topk500_4096": (lambda x: x.topk(500), (64, 4096), torch.randn),
    "topk32_65536": (lambda x: x.topk(32), (16, 65536), torch.randn),
    "topk64_1024": (lambda x: x.topk(64), (256, 1024), torch.randn),
    "topk20_320": (lambda x: x.topk(20), (1024, 320), torch.randn),
    "topk32_256": (lambda x: x.topk(32), (1024, 256), torch.randn),
    "topk40_1000_int64": (lambda x: x.topk(40), (256, 1000), integers),
    "topk64_dim0": (lambda x: x.topk(64, 0), (4096, 64), torch.randn),
    "kthvalue_4096": (lambda x: x.kthvalue(3, -1), (64, 4096), torch.randn),
    "median_4096": (lambda x: x.median(-1), (64, 4096), torch.randn),
    "median_short": (lambda x: x.median(-1), (4096, 50), torch.randn),
    "median_16": (lambda x: x.median(-1), (4096, 16), torch.randn),
    "median_all": (lambda x: x.median(), (1024, 1024), torch.randn),
    "nanmedian_4096": (lambda x: x.nanmedian(-1), (64, 4096), with_nans),
    "nanmedian_short": (lambda x: x.nanmedian(-1), (4096, 50), with_nans),
    "nanmedian_16": (lambda x: x.nanmedian(-1), (4096, 16), with_nans),
    "nanmedian_all": (lambda x: x.nanmedian(), (1024, 1024), with_nans),
    "mode_4096": (lambda x: x.mode(-1), (64, 4096), lambda shape: torch.randint(0, 50, shape)),
    "mode_short": (lambda x: x.mode(-1), (4096, 50), lambda shape: torch.randint(0, 9, shape)),
}


def main() -> None:
    args = arguments(CASES, kernels=True)
    device = os.environ.get("SORTS_DEVICE", "cpu")  # cuda: with --target cuda
    if os.environ.get("BLOCK_SORT_LINE"):  # lines a CUDA block sorts (lower_sort.py's switch)
        from tensorforge.graph import lower_sort

        lower_sort.BLOCK_SORT_LINE = int(os.environ["BLOCK_SORT_LINE"])

    def setup(name):
        fn, shape, make = CASES[name]
        return fn, (make(shape).to(device),)

    run(args, setup)


if __name__ == "__main__":
    main()
