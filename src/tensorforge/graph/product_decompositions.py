"""ATen operators torch's core decompositions leave whole, written as operators the graph lowers:
`addmv` (torch's full table has it: a product and an add), `addbmm` (a batched product summed
over the batch), `_trilinear` (nn.Bilinear's) and `masked_scatter` (the mask's running count picks each source element: a
cumsum, a gather and a where). Without them each ran eagerly inside the compiled graph.

masked_scatter assumes, as torch requires (and checks, raising), that the source holds at least
as many elements as the mask has True values.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    product = aten.bmm.default(batch1, batch2).sum(0)
    if alpha != 1:
        product = product * alpha
    if beta == 0:  # (torch ignores input then: NaN in it does not propagate)
        return product
    return input * beta + product if beta != 1 else input + product


def _masked_scatter(input, mask, source):
    shape = torch.broadcast_shapes(input.shape, mask.shape)
    flat_mask = mask.expand(shape).reshape(-1)
    flat_input = input.expand(shape).reshape(-1)
    position = (flat_mask.to(torch.int64).cumsum(0) - 1).clamp(min=0)
    picked = source.reshape(-1)[position]
    return torch.where(flat_mask, picked, flat_input).reshape(shape)


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """nn.Bilinear's product: each input unsqueezed at its expand dims (in increasing order),
    the three multiplied and summed over `sumdim` (one fused reduction: the broadcast product
    is never stored)."""
    widened = []
    for value, expand in ((i1, expand1), (i2, expand2), (i3, expand3)):
        for dim in sorted(expand):
            value = value.unsqueeze(dim)
        widened.append(value)
    product = widened[0] * widened[1] * widened[2]
    return product.sum(list(sumdim)) if len(sumdim) else product


def product_decompositions() -> dict:
    from torch._decomp import decomposition_table

    return {
        aten.addmv.default: decomposition_table[aten.addmv.default],
        aten.addbmm.default: _addbmm,
        aten._trilinear.default: _trilinear,
        aten.masked_scatter.default: _masked_scatter,
    }
