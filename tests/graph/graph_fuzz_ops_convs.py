"""Convolutions, pools and norms of other ranks for graph_fuzz.py's programs, in their awkward
forms: conv1d (depthwise, 'same', dilated), conv3d (grouped, strided), transposed convolutions
whose weights are inputs (output_padding, groups, dilation), 3-d pools, max pools whose indices
are read, instance norm."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.graph.graph_fuzz_products import MAX_NUMEL

if TYPE_CHECKING:
    from tests.graph.graph_fuzz import Generator


def op_conv_gaps(g: Generator):
    rng = g.rng
    rank = rng.choice([3, 3, 4, 5])
    x = g.pick(lambda t: t.is_floating_point() and t.dim() == rank)
    if x is None or rng.random() < 0.4:
        c = rng.choice([1, 2, 3, 4, 6])
        space = [rng.choice([1, 3, 5, 7, 13, 31]) for _ in range(rank - 2)]
        x = g.new_input((rng.choice([1, 2, 3]), c, *space))
    t = g.samples[x]
    if t.numel() > MAX_NUMEL:
        return None
    c, dims = t.shape[1], rank - 2
    kind = rng.randrange(6)
    if kind <= 1:  # a convolution (transposed: weights an input)
        groups = rng.choice([gr for gr in (1, 1, 2, 3, c) if c % gr == 0])
        fg = rng.choice([1, 2, 3])
        k = [rng.choice([1, 2, 3, 5]) for _ in range(dims)]
        stride, dilation = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 2])
        constant = rng.random() < 0.5
        bias = g.new_input((groups * fg,), constant=True) if rng.random() < 0.5 else None
        if kind == 1:
            w = g.new_input((c, fg, *k), constant=constant)
            pad = rng.randint(0, min(k) // 2)
            extra = rng.randint(0, max(stride, dilation) - 1)
            return (
                f"F.conv_transpose{dims}d({x}, {w}, {bias}, stride={stride}, padding={pad}, "
                f"output_padding={extra}, groups={groups}, dilation={dilation})"
            )
        w = g.new_input((groups * fg, c // groups, *k), constant=constant)
        padding = rng.choice([0, 1, 2, "'same'"]) if stride == 1 else rng.choice([0, 1])
        return (
            f"F.conv{dims}d({x}, {w}, {bias}, stride={stride}, padding={padding}, "
            f"dilation={dilation}, groups={groups})"
        )
    if kind == 2:  # a max pool, its values or indices
        k = rng.choice([1, 2, 3])
        which = rng.choice(["[0]", "[1]", "[1].float()"])
        return (
            f"F.max_pool{dims}d({x}, {k}, stride={rng.choice([None, 1, 2])}, "
            f"padding={rng.randint(0, k // 2)}, dilation={rng.choice([1, 2])}, "
            f"ceil_mode={rng.random() < 0.4}, return_indices=True){which}"
        )
    if kind == 3 and dims != 2:
        k = rng.choice([1, 2, 3])
        return (
            f"F.avg_pool{dims}d({x}, {k}, stride={rng.choice([None, 1, 2])}, "
            f"padding={rng.randint(0, k // 2)}, ceil_mode={rng.random() < 0.4}, "
            f"count_include_pad={rng.random() < 0.5})"
        )
    if kind == 4 and dims >= 1:
        w = g.new_input((c,), constant=rng.random() < 0.5)
        return rng.choice(
            [f"F.instance_norm({x})", f"F.instance_norm({x}, weight={w}, bias={w}, eps=1e-3)"]
        )
    if kind == 5 and dims == 2:
        return f"F.local_response_norm({x}, {rng.choice([1, 2, 3])})"
    return None
