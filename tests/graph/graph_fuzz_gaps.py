"""Operators graph_fuzz.py draws that ran eagerly until session 16, in their awkward forms: the C
library's functions (drawn by op_unary), and pointwise math, index reductions, scans and uneven
adaptive pools (op_lowered_gaps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator

# the C library's functions (te.LIBM_UNARY), in their domains and away from where they are
# ill-conditioned (acos near 1 turns an ulp of its argument into 1e-4)
LIBRARY_FORMS = (
    "torch.sin({x} * 3)",
    "torch.cos({x} * 40)",
    "torch.tan({x}.clamp(-1.4, 1.4))",
    "torch.asin({x}.clamp(-1, 1) * 0.9)",
    "torch.acos(torch.tanh({x}) * 0.9)",
    "torch.atan({x} * 5)",
    "torch.sinh({x})",
    "torch.cosh({x} * 2)",
    "torch.asinh({x} * 10)",
    "torch.acosh({x}.abs() + 1.1)",
    "torch.atanh({x}.clamp(-0.9, 0.9))",
    "torch.exp2({x} * 4)",
    "torch.log10({x}.abs() + 0.01)",
    "torch.log2({x}.abs() + 0.01)",
    "torch.special.erfc({x})",
    "torch.fmax({x}, {x}.flip(-1))",
    "torch.isinf({x} / ({x}.round()))",
)


def op_lowered_gaps(g: Generator):
    """Operators that ran eagerly until session 16 (pointwise math, index reductions, scans,
    uneven adaptive pools), in their awkward forms: small arguments, signed divisors, integers."""
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    rank = t.dim()
    keep = rng.random() < 0.4
    forms = [
        f"torch.log1p({x}.abs())",
        f"torch.log1p({x} * 1e-3)",
        f"torch.expm1({x} * 0.1)",
        f"torch.expm1({x})",
        f"F.selu({x})",
        f"F.celu({x}, 0.7)",
        f"torch.remainder({x} * 3, -1.5)",
        f"torch.fmod({x} * 3, -1.5)",
        f"torch.round({x} * 4, decimals=1)",
        f"{x}.argmax({d}, keepdim={keep})",
        f"{x}.argmin({d})",
        f"{x}.argmin()",
        f"{x}.min({d})[1]",
        f"({x} * 0.1 + 1).prod({d}, keepdim={keep})",
        f"({x} > 0).cumsum({d})",
        f"{x}.cumsum({d}) * 0.5",
    ]
    if rng.random() < 0.3:  # integers of their own (a bfloat16 chain truncated jumps)
        i = g.new_input(tuple(t.shape), torch.int64, "index:17")
        forms = [
            f"({i} - 8) % -3",
            f"torch.remainder({i} - 8, ({i} % 5) - 2 + ({i} % 5 == 2).long())",
            f"torch.fmod({i} - 8, 3)",
            f"torch.fmod({i} - 8, -({i} % 4) - 1)",
            f"({i} - 8).cumsum({d})",
            f"({i} - 8).prod({d})",
            f"({i} - 8).argmax({d})",
        ]
    if rank >= 3:
        oh, ow = rng.choice([1, 2, 3, 5]), rng.choice([1, 2, 3, 4])
        forms += [
            f"F.adaptive_avg_pool2d({x}, ({oh}, {ow}))",
            f"F.adaptive_max_pool2d({x}, ({oh}, {ow}))",
        ]
    return rng.choice(forms)
