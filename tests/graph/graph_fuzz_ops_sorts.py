"""Sorts graph_fuzz.py draws (op_sorts): sort (stable, so its indices are torch's; descending),
argsort, topk (k of the whole line too), kthvalue, median and nanmedian (with NaNs; of the whole
tensor too) along a random dimension (negative or not), ties from rounding, on floats and
integers. topk, kthvalue and (nan)median give their values only (their indices among equal
values are not torch's promise)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator


def op_sorts(g: Generator):
    """A sort-shaped operator along a random dimension."""
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    m = t.shape[d]
    k = rng.randint(1, min(m, 20)) if m > 0 else 1
    if m == 0:
        return f"torch.sort({x}, dim={d}, stable=True)[0]"
    forms = [
        f"torch.sort({x}, dim={d}, stable=True)[0]",
        f"torch.sort(({x} * 2).round(), dim={d}, stable=True, descending=True)[1]",
        f"torch.argsort(({x} * 2).round(), dim={d}, stable=True)",
        f"torch.topk({x}, {k}, {d})[0]",
        f"torch.topk({x}, {k}, {d}, largest=False)[0] * 2",
        f"torch.kthvalue(({x} * 2).round(), {k}, {d})[0]",
        f"torch.median({x}, {d})[0]",
        f"torch.median(({x} * 2).round(), {d}, keepdim=True)[0]",
        f"torch.topk({x}, {rng.randint(1, m)}, {d})[0]",
        f"torch.nanmedian(torch.where({x} > 0.7, float('nan'), {x}), {d})[0]",
        f"torch.nanmedian(torch.where({x} > 0.7, float('nan'), {x})).expand_as({x})",
    ]
    if rng.random() < 0.3:  # integers of their own
        i = g.new_input(tuple(t.shape), torch.int64, "index:17")
        forms = [
            f"torch.sort({i} % 5, dim={d}, stable=True)[1]",
            f"torch.topk({i} - 8, {k}, {d})[0]",
            f"torch.median({i} % 3, {d})[0]",
        ]
    return rng.choice(forms)
