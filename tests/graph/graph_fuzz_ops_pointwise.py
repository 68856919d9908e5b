"""Operators graph_fuzz.py draws that ran eagerly until session 17 (lower_bits.py, lower_norms.py,
the diagonal and unfold views), in their awkward forms: bounds that cross (lo > hi), signed zeros,
norms of every order over any dimension, empty-ish and size-1 dimensions, shift counts past the
width and negative, every integer type."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator

ORDS = ["2", "1", "3", "0.5", "0", "float('inf')", "float('-inf')", "-2"]
SHIFT_TYPES = ["torch.int8", "torch.int16", "torch.int32", "torch.int64", "torch.uint8"]


def op_pointwise_gaps(g: Generator):
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    rank = t.dim()
    keep = rng.random() < 0.4
    half = t.dtype != torch.float32
    forms = [
        f"torch.clamp({x}, {x}.flip(-1), {x}.flip(-1) + 0.5)",
        f"torch.clamp({x}, min={x}.flip({d}))",
        f"torch.clamp({x}, max={x}.mean({d}, keepdim=True))",
        f"F.normalize({x}, dim={d})",
        f"F.cosine_similarity({x}, {x}.flip(-1) + 1, dim={d})",
        f"torch.copysign({x}, {x}.flip(-1) * 0)",
        f"torch.signbit({x} * 0) | ({x} < 0)",
        f"torch.angle({x}.round())",
        f"F.rrelu({x}, 0.1, 0.4, training=False)",
        f"torch.linalg.vector_norm({x}, {rng.choice(ORDS)}, {d}, keepdim={keep})",
        f"torch.linalg.vector_norm({x}.round(), {rng.choice(ORDS)})",
        f"{x}.round().any({d}, keepdim={keep})",
        f"({x} > -1).all({d})",
        f"({x} > 1).any()",
        f"{x}.unfold({d}, {rng.randint(1, t.shape[d])}, {rng.randint(1, 3)}) * 2",
    ]
    forms.append(f"torch.nextafter({x}, {x}.flip(-1))")
    forms.append(f"torch.frexp({x}).mantissa * torch.frexp({x}).exponent.to({x}.dtype)")
    if rank >= 2:
        off = rng.randint(-2, 2)
        forms += [
            f"torch.diagonal({x}, {off}, {d}, {(d + 1) % rank}) + 1",
            f"torch.trace({x}.flatten(0, -2))",
        ]
    if rank in (2, 3) and not half:
        p = rng.choice(["2.0", "1.0", "float('inf')", "0.0", "3.0"])
        forms.append(f"torch.cdist({x}, {x}.flip(-2)[..., :1, :] * 2, {p})")
    if rng.random() < 0.35:  # integers of their own
        i = g.new_input(tuple(t.shape), torch.int64, "index:17")
        kind = rng.choice(SHIFT_TYPES)
        k = f"({i} - 8).to({kind})"
        forms = [
            f"{k} & ({i} * 7).to({kind})",
            f"{k} | 5",
            f"{k} ^ -3" if kind != "torch.uint8" else f"{k} ^ 3",
            f"{k} << ({i} * 5 - 20).to({kind})",
            f"{k} >> ({i} * 5 - 20).to({kind})",
            f"{k} << 3",
            f"{k} >> 2",
            f"torch.bitwise_left_shift({i} - 8, {i} * 4)",
            f"torch.gcd({k}, ({i} * 5 - 20).to({kind}))",
            f"torch.lcm({i} - 8, {i} * 3 + 1)",
        ]
    return rng.choice(forms)


def op_part_writes(g: Generator):
    """Writes into part of a tensor, as functionalized in-place writes reach the graph
    (slice / select / diagonal scatters; session 18): source shapes from the slice's."""
    picked = g.float_and_dim()
    if picked is None:
        return None
    (x, t, d), rng = picked, g.rng
    size = t.shape[d]
    start = rng.randint(-size, size - 1)
    step = rng.choice([1, 1, 2, 3])
    count = len(range(*slice(start, None, step).indices(size)))
    src = list(t.shape)
    src[d] = count
    shape = ", ".join(str(s) for s in src)
    picked_row = f"{x}.select({d}, {rng.randrange(size)})" + (".flip(0)" if t.dim() > 1 else "")
    forms = [
        f"torch.slice_scatter({x}, {x}.new_ones({shape}).cumsum({d}) * 0.25, {d}, {start}, None, {step})",
        f"torch.select_scatter({x} * 2, {picked_row} + 1, {d}, {rng.randrange(size) - size})",
    ]
    if t.dim() >= 2:
        d2 = (d + 1) % t.dim()
        off = rng.randint(-2, 2)
        forms.append(
            f"torch.diagonal_scatter({x}, {x}.diagonal({off}, {d}, {d2}).exp(), {off}, {d}, {d2})"
        )
    return rng.choice(forms)
