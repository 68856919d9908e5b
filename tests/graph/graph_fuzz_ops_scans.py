"""Operators graph_fuzz.py draws that ran eagerly until session 17, in their awkward forms:
cumprod, cummax / cummin (values and indices, ties from rounding), logcumsumexp (-inf from
masks), on floats and integers, along positive and negative dimensions (op_scan_gaps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator


def op_scan_gaps(g: Generator):
    """A scan that ran eagerly until session 17, along a random dimension (negative or not)."""
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    forms = [
        f"({x} * 0.1 + 1).cumprod({d})",
        f"{x}.cummax({d})[0]",
        f"{x}.cummin({d})[0] * 2",
        f"({x} * 2).round().cummax({d})[1]",  # ties: the later index
        f"({x} * 2).round().cummin({d})[1]",
        f"torch.logcumsumexp({x}, {d})",
        f"torch.logcumsumexp({x}.masked_fill({x} < 0, -float('inf')), {d})",
    ]
    if rng.random() < 0.3:  # integers of their own
        i = g.new_input(tuple(t.shape), torch.int64, "index:17")
        forms = [
            f"({i} - 8).cummax({d})[0]",
            f"({i} % 3).cummin({d})[1]",
            f"(({i} % 3) - 1).cumprod({d})",
        ]
    return rng.choice(forms)
