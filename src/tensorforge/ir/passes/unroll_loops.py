"""Replace loops marked `unroll` (or under an `auto_unroll_max_step` pragma) by copies of their body."""

from __future__ import annotations

from tensorforge.ir.stmt import For, LoopKind, Stmt, seq
from tensorforge.ir.visit import map_children, substitute, walk
from tensorforge.te.expr import Const, const

MAX_UNROLL = 4096  # statements beyond this stay a loop with an unroll hint


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


def _size(stmt) -> int:
    return sum(1 for _ in walk(stmt))


def _innermost_work(loop: For) -> int:
    """Iterations of this loop nest, if every loop inside has constant extent (else a large number)."""
    total = 1
    for n in walk(loop):
        if isinstance(n, For):
            if not isinstance(n.extent, Const) or n.kind is not LoopKind.SERIAL and n is not loop:
                return 1 << 30
            total *= n.extent.value
    return total
