"""Scans: cumsum along any dimension, as blocked reductions.

A prefix sum of m elements is cut in blocks of about sqrt(m) (64 where m is known only at run
time): one kernel sums each block, one sums the blocks before each block (its carry), and the
output's kernel sums its own block up to itself and adds the carry as an epilogue. Each output
reads about 2 sqrt(m) elements, each kernel is a plain reduction (anchors of kind "scan": the
rules' reduction schedule, which "auto" keeps; the first guess took 100x longer on the block
sums), and the
sums are float32 for half types (int64 for integers and bools), as torch accumulates. Where
the whole dimension is one block (m <= 64), the output's kernel alone.
"""

from __future__ import annotations

import math

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, in_dtype, opmath_dtype

aten = torch.ops.aten

BLOCK = 64  # a run-time extent's block; a static one's whole dimension up to this


@lowers(aten.cumsum.default)
def cumsum(ctx, node, x, dim, dtype=None):
    out = ctx.dtype_of(node)
    acc = opmath_dtype(out)
    x = ctx.no_anchor(x)
    if x.ndim == 0:  # (dim 0 or -1: the element itself)
        return ctx.pointwise(lambda v: v, [x], compute=acc)
    d = dim % x.ndim
    m = x.shape[d]
    block = _block_size(m)
    shape = ctx.shape_of(node)

    def along(index, position):  # index with dimension d replaced
        return (*index[:d], position, *index[d + 1 :])

    carry = None
    if not (isinstance(m, int) and m <= block):
        carry = _carries(ctx, node, x, d, m, block, acc, along)
    k = te.reduce_axis((0, block), name="k")

    def own_block(*i):  # the elements of i's block up to i
        start = (i[d] // block) * block
        v = in_dtype(x.at(along(i, start + k.var)), acc)
        return te.sum(v, axis=k, where=k.var <= i[d] % block)

    stage = te.compute(shape, own_block, name=ctx.unique(f"cumsum_{node.name}"))
    reads = x.reads | (carry.reads if carry is not None else frozenset())
    anchor = reduction_anchor(ctx, "scan", [stage], reads, shape, x.nodes + (node.name,))

    def at(ia):
        total = stage[tuple(ia)]
        if carry is None:
            return total
        return total + carry.at(along(ia, ia[d] // block))

    return ctx.anchored(anchor, at, out)


def _block_size(m) -> int:
    if not isinstance(m, int):
        return BLOCK
    return m if m <= BLOCK else math.isqrt(m - 1) + 1


def _carries(ctx, node, x: Lazy, d: int, m, block: int, acc: str, along) -> Lazy:
    """Each block's carry along d, in memory: the sum of all the blocks before it."""
    blocks = (m + block - 1) // block
    shape = along(x.shape, blocks)
    k = te.reduce_axis((0, block), name="k")

    def block_sum(*i):
        position = i[d] * block + k.var
        inside = position < m
        v = in_dtype(x.at(along(i, te.min(position, m - 1))), acc)  # (clamped: read in bounds)
        return te.sum(v, axis=k, where=inside)

    sums = _stored(ctx, node, x, shape, block_sum, acc, "block_sums")
    b = te.reduce_axis((0, blocks), name="b")

    def carry(*i):
        return te.sum(sums.at(along(i, b.var)), axis=b, where=b.var < i[d])

    return _stored(ctx, node, sums, shape, carry, acc, "carries")


def _stored(ctx, node, source: Lazy, shape, body, acc: str, name: str) -> Lazy:
    """The reduction `body` over `shape` (reading `source`) as a kernel of its own, stored."""
    stage = te.compute(shape, body, name=ctx.unique(f"{name}_{node.name}"))
    anchor = reduction_anchor(ctx, "scan", [stage], source.reads, shape, source.nodes)
    return ctx.materialize(ctx.anchored(anchor, lambda ia: stage[tuple(ia)], acc))
