"""Double-buffer shared tiles refilled by a serial loop: fill tile k+1 while computing on tile k.

    for ko in range(n):                        tile = allocate(2 * size)
        tile = allocate(size)                   fill(tile[0:size], ko=0); sync
        fill(tile, ko)             ->           for ko in range(n):
        compute(tile)                               if ko + 1 < n: fill(tile[other half], ko + 1)
                                                    compute(tile[half ko % 2]); sync

One barrier per iteration instead of two, and the next tile's global loads overlap the compute.
Applies to allocations marked by `s[T].double_buffer()` (an `Attr("double_buffer")` around them);
the result is wrapped in `Attr("double_buffer_managed")` so the sync pass leaves it alone.
"""

from __future__ import annotations

from typing import Any

from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    For,
    IfThenElse,
    LoopKind,
    Seq,
    Stmt,
    Sync,
    seq,
)
from tensorforge.ir.visit import map_children, rewrite, substitute, walk
from tensorforge.te.expr import LT, Expr, const


def inject_double_buffer(stmt: Stmt) -> Stmt:
    return _visit(stmt)


def _visit(node: Any) -> Any:
    if isinstance(node, For) and node.kind in (LoopKind.SERIAL, LoopKind.UNROLLED):
        layers, body = _peel(node.body)
        if layers:
            return _double_buffer(node, layers, _visit(body))
    if isinstance(node, Attr) and node.key == "double_buffer":
        return _visit(node.body)  # not refilled by a serial loop: a plain allocation
    return map_children(node, _visit)


def _peel(body: Stmt) -> tuple[list[Allocate], Stmt]:
    layers: list[Allocate] = []
    while (
        isinstance(body, Attr) and body.key == "double_buffer" and isinstance(body.body, Allocate)
    ):
        layers.append(body.body)
        body = body.body.body
    return layers, body


def _double_buffer(loop: For, layers: list[Allocate], body: Stmt) -> Stmt:
    buffers = {id(a.buffer): a for a in layers}
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    fills: list[Stmt] = []
    while stmts and _writes(stmts[0], buffers) and not _reads(stmts[0], buffers):
        fills.append(stmts.pop(0))
    if not fills or not stmts:
        return _restore(loop, layers, body)
    fill, rest = seq(*fills), seq(*stmts)
    k = loop.var
    first = loop.min
    last = loop.min + loop.extent

    def half(iteration: Expr) -> Expr:
        return (iteration - first) % 2

    def fill_at(iteration: Expr) -> Stmt:
        return _offset(substitute(fill, {k: iteration}), buffers, half(iteration), stores=True)

    prefetch = IfThenElse(LT(k + 1, last), fill_at(k + 1))
    compute = _offset(rest, buffers, half(k), stores=False)
    new_loop = For(
        k,
        loop.min,
        loop.extent,
        seq(prefetch, compute, Sync()),
        loop.kind,
        loop.thread_tag,
        loop.pragmas,
    )
    out: Stmt = Attr(
        "double_buffer_managed",
        tuple(a.buffer.name for a in layers),
        seq(fill_at(first), Sync(), new_loop),
    )
    for alloc in reversed(layers):
        out = Allocate(alloc.buffer, alloc.extent * 2, out)
    return out


def _restore(loop: For, layers: list[Allocate], body: Stmt) -> Stmt:
    for alloc in reversed(layers):
        body = Allocate(alloc.buffer, alloc.extent, body)
    return For(loop.var, loop.min, loop.extent, body, loop.kind, loop.thread_tag, loop.pragmas)


def _writes(s: Stmt, buffers: dict[int, Allocate]) -> bool:
    return any(isinstance(n, BufferStore) and id(n.buffer) in buffers for n in walk(s))


def _reads(s: Stmt, buffers: dict[int, Allocate]) -> bool:
    return any(isinstance(n, BufferLoad) and id(n.buffer) in buffers for n in walk(s))


def _offset(s: Stmt, buffers: dict[int, Allocate], which: Expr, stores: bool) -> Stmt:
    """Shift accesses (stores or loads) of the double-buffered tiles into half `which`."""

    def shifted(buf: Buffer, index: Expr) -> Expr:
        size = buffers[id(buf)].extent
        offset = which * size
        if "x" in index.dtype:  # a vector index (Ramp): shift its base
            from tensorforge.ir.expr import Ramp

            if isinstance(index, Ramp):
                return Ramp(index.base + offset, index.stride, index.lanes)
        return index + offset

    def rule(n: Any) -> Any:
        if stores and isinstance(n, BufferStore) and id(n.buffer) in buffers:
            return BufferStore(n.buffer, (shifted(n.buffer, n.indices[0]),), n.value, n.predicate)
        if not stores and isinstance(n, BufferLoad) and id(n.buffer) in buffers:
            return BufferLoad(n.buffer, (shifted(n.buffer, n.indices[0]),), n.predicate)
        return None

    return rewrite(s, rule)


__all__ = ["inject_double_buffer", "const"]
