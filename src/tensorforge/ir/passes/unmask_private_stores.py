"""Masked vector stores into a kernel's own small buffers, made whole: the lanes the mask leaves
off get their old value back (`A[v] = x if m` -> `A[v] = select(m, x, A[v])`).

A vectorized reduction's last step over a row of a length known only at run time (its partials
past the row masked off) stored its vector partials with a mask: a masked store to a stack
buffer keeps LLVM from holding it in registers, and the full load that combines the partials
right after waits for it (no store-to-load forwarding from a masked store). A 12 x 197 x 197
softmax under dynamic=True, 1 thread: 273 -> 226 us (the same row length as a constant: 192).

Only where the mask depends on run-time values (one known lane by lane is stored in plain
pieces already), and where that is safe: the buffer is allocated in the kernel with a constant extent that
every lane of the store provably lies in, and no parallel loop lies between its allocation and
the store (one thread owns it: the read and write back of a lane another thread stores would be
a race). CPU only: a GPU block's buffers are shared by its threads.
"""

from __future__ import annotations

import dataclasses

from tensorforge.ir.arith.interval import Analyzer, Interval
from tensorforge.ir.arith.lanes import lane_offsets
from tensorforge.ir.expr import Broadcast, BufferLoad
from tensorforge.ir.passes.fold_lane_masks import constant_lanes
from tensorforge.ir.stmt import Allocate, BufferStore, For, LoopKind, Stmt
from tensorforge.ir.visit import map_children
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, Select, Var


def unmask_private_stores(stmt: Stmt) -> Stmt:
    """`A[v] = x if m` -> `A[v] = select(m, x, A[v])` where A is this thread's own buffer."""
    return _visit(stmt, {}, frozenset())


def _visit(s: Stmt, ranges: dict[Var, Interval], private: frozenset) -> Stmt:
    match s:
        case Allocate(buffer=buffer, extent=Const(value=extent)):
            inner = private | {(buffer, extent)}
            return map_children(s, lambda c: _child(c, ranges, inner))
        case For(var=var, min=low, extent=extent, kind=kind):
            # NOTE: a parallel loop's iterations share what was allocated outside it
            shared = kind in (LoopKind.PARALLEL, LoopKind.THREAD_BINDING)
            inner = frozenset() if shared else private
            ranges = {**ranges, var: Interval.from_range(low, extent)}
            return map_children(s, lambda c: _child(c, ranges, inner))
        case BufferStore(buffer=buffer, indices=(index,), value=value, predicate=mask) if (
            mask is not None and not isinstance(mask, Broadcast) and dt.lanes_of(mask.dtype) > 1
        ):
            extent = dict(private).get(buffer)
            if extent is None or not _inside(index, extent, ranges):
                return s
            if constant_lanes(mask) is not None:
                # known lane by lane, it is stored as plain pieces already (codegen), and the
                # select's load of the old value costs: a register tile's padded last vector,
                # conv2d 3x3 at 14 x 14 x 256, first guess, 1 thread, 1.70 -> 1.87 ms with it
                return s
            old = BufferLoad(buffer, (index,))
            return dataclasses.replace(s, value=Select(mask, value, old), predicate=None)
    return map_children(s, lambda c: _child(c, ranges, private))


def _child(c, ranges: dict[Var, Interval], private: frozenset):
    return _visit(c, ranges, private) if isinstance(c, Stmt) else c


def _inside(index, extent: int, ranges: dict[Var, Interval]) -> bool:
    """Does every lane of the vector `index` provably lie in [0, extent)?"""
    parts = lane_offsets(index)
    if parts is None:
        return False
    base, offsets = parts
    lo, hi = Analyzer(ranges).bounds(base)
    return lo + min(offsets) >= 0 and hi + max(offsets) < extent
