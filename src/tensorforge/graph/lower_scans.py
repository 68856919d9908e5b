"""Scans: cumsum along any dimension, as blocked reductions.

A prefix sum is cut in blocks: one kernel sums each block, the blocks' own prefix sums give
each block its carry (the sum of the blocks before it), and the output's kernel sums its own
block up to itself and adds the carry as an epilogue. With static sizes, blocks of 16 and the
block sums' prefixes computed the same way, until they fit one block (4099 elements: 257 block
sums, 17, then one kernel; about 8 + 8 + 8 reads an element); at run-time sizes, blocks of 64
and each carry summed directly (two levels, about 32 + m / 128 reads an element). A dimension
of at most 64 (static) is one kernel. Each kernel is a plain reduction (anchors of kind "scan":
the rules' reduction schedule, which "auto" keeps; the first guess took 100x longer on block
sums). The sums are float32 for half types (int64 for integers and bools), as torch's.
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_reduce import reduction_anchor
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import Lazy, in_dtype, opmath_dtype

aten = torch.ops.aten

ONE_KERNEL = 64  # a static dimension up to this is one block
STATIC_BLOCK = 16  # longer static dimensions: blocks of this, their sums' prefixes recursively
RUN_TIME_BLOCK = 64  # a run-time extent's block (its carries summed directly)


@lowers(aten.cumsum.default)
def cumsum(ctx, node, x, dim, dtype=None):
    out = ctx.dtype_of(node)
    acc = opmath_dtype(out)
    x = ctx.no_anchor(x)
    if x.ndim == 0:  # (dim 0 or -1: the element itself)
        return ctx.pointwise(lambda v: v, [x], compute=acc)
    return _prefix_sums(ctx, node, x, dim % x.ndim, acc, out)


def _prefix_sums(ctx, node, x: Lazy, d: int, acc: str, out: str) -> Lazy:
    """The inclusive prefix sums of `x` along `d`, in `out` (an anchored value)."""
    m = x.shape[d]
    block = _block_size(m)
    shape = x.shape

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
        return total + carry(ia, ia[d] // block)

    return ctx.anchored(anchor, at, out)


def _block_size(m) -> int:
    if not isinstance(m, int):
        return RUN_TIME_BLOCK
    return m if m <= ONE_KERNEL else STATIC_BLOCK


class _Carry:
    """Block b's carry at an index: the sum of the blocks before b (read from memory)."""

    def __init__(self, stored: Lazy, along, inclusive: bool):
        self.stored, self.along, self.inclusive = stored, along, inclusive
        self.reads = stored.reads

    def __call__(self, index, b):
        if not self.inclusive:  # (stored: the sum of the blocks before each)
            return self.stored.at(self.along(index, b))
        before = self.stored.at(self.along(index, te.max(b - 1, 0)))  # (clamped: in bounds)
        return te.if_then_else(b > 0, before, te.const(0, self.stored.dtype))


def _carries(ctx, node, x: Lazy, d: int, m, block: int, acc: str, along) -> _Carry:
    """Each block's carry along d: with static sizes the block sums' own inclusive prefix sums
    (the same scheme, one level down), else each carry summed directly from the block sums."""
    blocks = (m + block - 1) // block
    shape = along(x.shape, blocks)
    k = te.reduce_axis((0, block), name="k")

    def block_sum(*i):
        position = i[d] * block + k.var
        inside = position < m
        v = in_dtype(x.at(along(i, te.min(position, m - 1))), acc)  # (clamped: read in bounds)
        return te.sum(v, axis=k, where=inside)

    sums = _stored(ctx, node, x, shape, block_sum, acc, "block_sums")
    if isinstance(m, int):
        prefixes = ctx.materialize(_prefix_sums(ctx, node, sums, d, acc, acc))
        return _Carry(prefixes, along, inclusive=True)
    b = te.reduce_axis((0, blocks), name="b")

    def carry(*i):
        return te.sum(sums.at(along(i, b.var)), axis=b, where=b.var < i[d])

    return _Carry(_stored(ctx, node, sums, shape, carry, acc, "carries"), along, inclusive=False)


def _stored(ctx, node, source: Lazy, shape, body, acc: str, name: str) -> Lazy:
    """The reduction `body` over `shape` (reading `source`) as a kernel of its own, stored."""
    stage = te.compute(shape, body, name=ctx.unique(f"{name}_{node.name}"))
    anchor = reduction_anchor(ctx, "scan", [stage], source.reads, shape, source.nodes)
    return ctx.materialize(ctx.anchored(anchor, lambda ia: stage[tuple(ia)], acc))
