"""Scatters (scatter, scatter_add, scatter_reduce, index_put, index_add, index_copy,
embedding_bag), float32: eager torch vs tensorforge's ir_builder kernels, same process,
interleaved.

    python benchmarks/scatters.py [--threads 1] [--repeats 7] [--cases scatter_add_rows,...]
        [--kernels]  (tensorforge's kernels even for operators run eagerly on CPU targets)

Each repeat times both in turn (a few calls each); the best over repeats is reported (the
machine may be shared) with eager / tensorforge (> 1: tensorforge is faster) and the largest
relative difference from eager.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from eager_vs_compiled import arguments, run  # benchmarks/: the script's folder is on sys.path


def rows_index(n, m, high):
    return torch.randint(0, high, (n, m))


CASES = {
    # name: (fn, inputs)
    "scatter_rows": (
        lambda x, i, s: x.scatter(1, i, s),
        lambda: (torch.randn(256, 1024), rows_index(256, 1024, 1024), torch.randn(256, 1024)),
    ),
    "scatter_add_rows": (
        lambda x, i, s: x.scatter_add(1, i, s),
        lambda: (torch.randn(256, 1024), rows_index(256, 1024, 1024), torch.randn(256, 1024)),
    ),
    "scatter_add_dim0": (
        lambda x, i, s: x.scatter_add(0, i, s),
        lambda: (torch.randn(1024, 256), rows_index(1024, 256, 1024), torch.randn(1024, 256)),
    ),
    "scatter_amax_noself": (
        lambda x, i, s: x.scatter_reduce(1, i, s, "amax", include_self=False),
        lambda: (torch.randn(256, 1024), rows_index(256, 1024, 1024), torch.randn(256, 1024)),
    ),
    "scatter_mean": (
        lambda x, i, s: x.scatter_reduce(1, i, s, "mean"),
        lambda: (torch.randn(256, 1024), rows_index(256, 1024, 1024), torch.randn(256, 1024)),
    ),
    "scatter_mean_dim0": (
        lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),
        lambda: (torch.randn(1024, 256), rows_index(1024, 256, 1024), torch.randn(1024, 256)),
    ),
    "scatter_mean_dim0_noself": (
        lambda x, i, s: x.scatter_reduce(0, i, s, "mean", include_self=False),
        lambda: (torch.randn(1024, 256), rows_index(1024, 256, 1024), torch.randn(1024, 256)),
    ),
    "scatter_mean_middle": (
        lambda x, i, s: x.scatter_reduce(1, i, s, "mean"),
        lambda: (torch.randn(16, 256, 64), rows_index(16, 256, 256).unsqueeze(-1).expand(16, 256, 64).contiguous(), torch.randn(16, 256, 64)),
    ),
    "scatter_mean_long_dim0": (
        lambda x, i, s: x.scatter_reduce(0, i, s, "mean"),
        lambda: (torch.randn(8192, 64), rows_index(4096, 64, 8192), torch.randn(4096, 64)),
    ),
    "index_put_acc": (
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (torch.randn(10000, 64), torch.randint(0, 10000, (20000,)), torch.randn(20000, 64)),
    ),
    "index_put": (
        lambda x, i, v: x.index_put((i,), v),
        lambda: (torch.randn(10000, 64), torch.randperm(10000)[:5000], torch.randn(5000, 64)),
    ),
    "index_put_1d_acc": (
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (torch.randn(100000), torch.randint(0, 100000, (200000,)), torch.randn(200000)),
    ),
    "index_add": (
        lambda x, i, v: x.index_add(0, i, v),
        lambda: (torch.randn(1000, 64), torch.randint(0, 1000, (5000,)), torch.randn(5000, 64)),
    ),
    "index_copy": (
        lambda x, i, v: x.index_copy(0, i, v),
        lambda: (torch.randn(10000, 64), torch.randperm(10000)[:5000], torch.randn(5000, 64)),
    ),
    "embedding_bag_sum": (
        lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"),
        lambda: (torch.randn(10000, 64), torch.randint(0, 10000, (8192,)), torch.arange(0, 8192, 16)),
    ),
    "embedding_bag_mean": (
        lambda w, i, o: F.embedding_bag(i, w, o, mode="mean"),
        lambda: (torch.randn(10000, 64), torch.randint(0, 10000, (8192,)), torch.arange(0, 8192, 16)),
    ),
    "embedding_bag_max": (
        lambda w, i, o: F.embedding_bag(i, w, o, mode="max"),
        lambda: (torch.randn(10000, 64), torch.randint(0, 10000, (8192,)), torch.arange(0, 8192, 16)),
    ),
}  # fmt: skip


def main() -> None:
    args = arguments(CASES, kernels=True)
    run(args, lambda name: (CASES[name][0], CASES[name][1]()))


if __name__ == "__main__":
    main()
