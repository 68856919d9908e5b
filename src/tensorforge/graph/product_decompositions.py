"""ATen operators torch's core decompositions leave whole, written as operators the graph lowers:
`addmv` (torch's full table has it: a product and an add), `addbmm` (a batched product summed
over the batch) and `masked_scatter` (the mask's running count picks each source element: a
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


def product_decompositions() -> dict:
    from torch._decomp import decomposition_table

    return {
        aten.addmv.default: decomposition_table[aten.addmv.default],
        aten.addbmm.default: _addbmm,
        aten.masked_scatter.default: _masked_scatter,
    }
