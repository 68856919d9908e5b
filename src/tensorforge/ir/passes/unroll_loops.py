"""Replace loops marked `unroll` (or under an `auto_unroll_max_step` pragma) by copies of their body."""

from __future__ import annotations

from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.ir.stmt import BufferStore, For, LoopKind, Stmt, seq
from tensorforge.ir.visit import map_children, substitute, walk
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Const, const

MAX_UNROLL = 4096  # code (see _size) beyond this stays a loop, with a bounded unroll hint
# NOTE: a loop left alone keeps its `unroll` mark, which the CPU backends print as a bounded
# unroll count (LLVM fully unrolled nests of "unroll.enable" loops for minutes). Only an innermost
# loop whose copies fit MAX_UNROLL gets one: LLVM multiplies nested counts (4 x 4 copies of a
# fully unrolled 7x7 tile took 5 s to build) and took 12 s over a 40-copy body of 21-lane
# gathers unrolled 4 times more (fuzz: seed 13 #82, c seed 0 #669)
PARTIAL_UNROLL = 4


def unroll_loops(stmt: Stmt) -> Stmt:
    """`for i in range(3) (unrolled): S(i)` -> `S(0); S(1); S(2)` when the extent is constant."""
    return _unroll(stmt, auto_max=0)


def _unroll(node, auto_max: int):
    if not isinstance(node, For):
        return map_children(node, lambda c: _unroll(c, auto_max))
    pragmas = dict(node.pragmas)
    if "auto_unroll_max_step" in pragmas:
        auto_max = int(pragmas["auto_unroll_max_step"] or 0)
    body = _unroll(node.body, auto_max)
    loop = (
        node
        if body is node.body
        else For(node.var, node.min, node.extent, body, node.kind, node.thread_tag, node.pragmas)
    )
    extent = loop.extent
    if not isinstance(extent, Const) or not isinstance(loop.min, Const):
        return loop
    wants = loop.kind is LoopKind.UNROLLED or "unroll_explicit" in pragmas
    auto = loop.kind is LoopKind.SERIAL and auto_max > 0 and _innermost_work(loop) <= auto_max
    if not (wants or auto):
        return loop
    if extent.value * _size(loop.body) > MAX_UNROLL:
        return loop
    copies = [
        substitute(loop.body, {loop.var: const(loop.min.value + k, loop.var.dtype)})
        for k in range(extent.value)
    ]
    return seq(*copies)


def partial_unroll(loop: For) -> int:
    """How many copies of its body a backend may make of `loop`, an `unroll` loop this pass left
    alone: PARTIAL_UNROLL, or 1 where it has loops inside or those copies would pass the budget."""
    if any(isinstance(n, For) for n in walk(loop.body)):
        return 1
    return PARTIAL_UNROLL if PARTIAL_UNROLL * _size(loop.body) <= MAX_UNROLL else 1


def _size(stmt) -> int:
    """The code one copy of `stmt` makes: a node each, and a gather or scatter (a vector access
    that is not one contiguous run) a node per lane, as every backend emits it lane by lane."""
    total = 0
    for n in walk(stmt):
        total += 1
        if isinstance(n, (BufferLoad, BufferStore)) and not _contiguous(n.indices):
            total += max(dt.lanes_of(i.dtype) for i in n.indices) - 1
    return total


def _contiguous(indices) -> bool:
    """Every index a scalar, one address for every lane, or consecutive addresses."""
    return all(
        dt.lanes_of(i.dtype) == 1
        or isinstance(i, Broadcast)
        or (isinstance(i, Ramp) and isinstance(i.stride, Const) and i.stride.value == 1)
        for i in indices
    )


def _innermost_work(loop: For) -> int:
    """Iterations of this loop nest, if every loop inside has constant extent (else a large number)."""
    total = 1
    for n in walk(loop):
        if isinstance(n, For):
            if not isinstance(n.extent, Const) or n.kind is not LoopKind.SERIAL and n is not loop:
                return 1 << 30
            total *= n.extent.value
    return total
