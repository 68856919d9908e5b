"""Products for graph_fuzz.py's programs: matrix products, convolutions, attention and
embeddings, on the shapes the program has made so far."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator

MAX_NUMEL = 1 << 15  # a program's values stay small
SIZES = [1, 2, 3, 5, 7, 13, 17, 31, 64, 65, 127]


def op_matmul(g: Generator):
    x = g.pick(lambda t: t.is_floating_point() and t.dim() >= 1)
    if x is None:
        return None
    t, rng = g.samples[x], g.rng
    k = t.shape[-1]
    n = g.size(big=True)
    if k * n > MAX_NUMEL:
        n = rng.choice(SIZES[:6])
    constant = rng.random() < 0.5
    form = rng.randrange(7)
    if form == 0:
        w = g.new_input((n, k), constant=constant)
        b = g.new_input((n,), constant=constant) if rng.random() < 0.6 else None
        return f"F.linear({x}, {w}, {b})"
    if form == 1:
        y = g.new_input((k, n), constant=constant)
        return f"{x} @ {y}"
    if form == 2 and t.dim() == 2:
        y = g.new_input((k, n), constant=constant)
        c = g.new_input(rng.choice([(n,), (1, n), (t.shape[0], n)]))
        return (
            f"torch.addmm({c}, {x}, {y}, beta={rng.choice([1, 0.5])}, alpha={rng.choice([1, 2])})"
        )
    if form == 3 and t.dim() == 3:
        y = g.new_input((t.shape[0], k, n))
        return f"torch.bmm({x}, {y})"
    if form == 4 and t.dim() >= 2:
        y = g.new_input((*t.shape[:-2], k, n)[-rng.randint(2, t.dim()) :])
        return f"torch.matmul({x}, {y})"
    if form == 5:
        y = g.new_input((k,))
        return f"torch.matmul({x}, {y})"
    if form == 6 and t.dim() >= 2:
        return f"{x} @ {x}.transpose(-1, -2)"
    return None


def op_conv(g: Generator):
    x = g.pick(lambda t: t.is_floating_point() and t.dim() == 4)
    rng = g.rng
    if x is None or rng.random() < 0.3:
        c = rng.choice([1, 2, 3, 4, 8, 16])
        hw = rng.choice([1, 3, 5, 7, 13, 17, 31])
        x = g.new_input((rng.choice([1, 2, 3]), c, hw, rng.choice([hw, 5, 9])))
    t = g.samples[x]
    n, c, h, w = t.shape
    if n * c * h * w > MAX_NUMEL:
        return None
    kind = rng.randrange(6)
    if kind <= 2:  # convolution
        groups = rng.choice([gr for gr in (1, 1, 2, 3, 4, c) if c % gr == 0])
        filters = (
            groups * rng.choice([1, 2, 3, 5, 8])
            if groups == c
            else rng.choice([f for f in (1, 2, 3, 4, 6, 8, 16) if f % groups == 0] or [groups])
        )
        kh, kw = rng.choice([(1, 1), (3, 3), (2, 3), (5, 5), (7, 7), (3, 1)])
        stride = rng.choice([1, 1, 2, 3, (2, 1)])
        padding = rng.choice([0, 1, 2, (1, 0)])
        dilation = rng.choice([1, 1, 2])
        weight = g.new_input((filters, c // groups, kh, kw), constant=rng.random() < 0.6)
        bias = g.new_input((filters,), constant=True) if rng.random() < 0.5 else None
        return (
            f"F.conv2d({x}, {weight}, {bias}, stride={stride}, padding={padding}, "
            f"dilation={dilation}, groups={groups})"
        )
    if kind == 3:
        k = rng.choice([1, 2, 3, 4])
        return (
            f"F.max_pool2d({x}, {k}, stride={rng.choice([None, 1, 2, 3])}, "
            f"padding={rng.randint(0, k // 2)}, dilation={rng.choice([1, 1, 2])}, "
            f"ceil_mode={rng.random() < 0.4})"
        )
    if kind == 4:
        k = rng.choice([1, 2, 3, 5])
        return (
            f"F.avg_pool2d({x}, {k}, stride={rng.choice([None, 1, 2])}, "
            f"padding={rng.randint(0, k // 2)}, ceil_mode={rng.random() < 0.4}, "
            f"count_include_pad={rng.random() < 0.5})"
        )
    out = (rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 2, 4, 6]))
    return rng.choice([f"F.adaptive_avg_pool2d({x}, {out})", f"F.adaptive_max_pool2d({x}, {out})"])


def op_attention(g: Generator):
    """scaled_dot_product_attention of a value (as queries) and new keys and values."""
    x = g.pick(lambda t: t.is_floating_point() and t.dim() in (3, 4))
    if x is None:
        return None
    shape = tuple(g.samples[x].shape)
    keys = g.rng.choice([shape[-2], 1, 7, 64])
    k = g.new_input((*shape[:-2], keys, shape[-1]))
    v = g.new_input((*shape[:-2], keys, g.rng.choice([shape[-1], 5])))
    causal = g.rng.random() < 0.4 and keys == shape[-2]
    mask = ""
    if not causal and g.rng.random() < 0.3:
        mask = f", attn_mask={g.new_input((shape[-2], keys), torch.bool, 'bool')}"
    return f"F.scaled_dot_product_attention({x}, {k}, {v}, is_causal={causal}{mask})"


def op_embedding(g: Generator):
    rows = g.rng.choice([3, 17, 64])
    width = g.rng.choice([1, 5, 16])
    table = g.new_input((rows, width), constant=g.rng.random() < 0.5)
    index = g.new_input(g.shape(g.rng.choice([1, 2])), torch.int64, f"index:{rows}")
    return f"F.embedding({index}, {table})"
