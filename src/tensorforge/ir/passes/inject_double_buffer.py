"""Multi-buffer shared tiles refilled by a serial loop: fill the tiles of the next N-1 iterations
while computing on this one (N = 2 is double buffering, N = 3 or 4 a software pipeline).

    for ko in range(n):                     tile = allocate(N * size)
        tile = allocate(size)                for s in range(N - 1): fill(tile[slot s], ko=s); commit
        fill(tile, ko)            ->         for ko in range(n):
        compute(tile)                            wait until fill ko is done; sync
                                                 compute(tile[slot ko % N])
                                                 if ko + N - 1 < n: fill(tile[slot ko + N - 1], ...)
                                                 commit
                                             sync

Slot (ko + N - 1) % N is the one iteration ko - 1 computed on, so the barrier at the top of the
iteration both publishes fill ko and frees that slot: one barrier per iteration. (With N = 2 the
fill goes before the compute, so that it overlaps it.) The fills are
wrapped in `Attr("async_commit")` (a cp.async commit group on the GPU: fills that are plain
copies of global memory become asynchronous copies) and the barrier in `Attr("async_wait", N-2)`
(wait until at most N - 2 groups are in flight: fill ko has landed). Elsewhere the marks are
no-ops and ordinary stores plus the barrier are correct as they stand.
Applies to allocations marked by `s[T].double_buffer(stages)` (an `Attr("double_buffer")` around
them, its value the tile's name, or (name, stages)); the result is wrapped in
`Attr("double_buffer_managed")` so the sync pass leaves it alone.
"""

from __future__ import annotations

from typing import Any

from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LoopKind,
    Seq,
    Stmt,
    Sync,
    seq,
)
from tensorforge.ir.visit import map_children, rewrite, substitute, walk
from tensorforge.te.expr import LT, Const, Expr, const

# With 3 or more stages the refill is issued after the compute: its copies queue behind the
# math instead of delaying the first shared loads after the barrier, and the stages still ahead
# cover its latency (measured on the H100: tensor-core GEMM 4096^3 +0-4%). With 2 stages the
# refill must come first, or nothing would overlap it. FILL_LAST = False always fills first.
FILL_LAST = True


def inject_double_buffer(stmt: Stmt) -> Stmt:
    return _visit(stmt)


def _visit(node: Any) -> Any:
    if isinstance(node, For) and node.kind in (LoopKind.SERIAL, LoopKind.UNROLLED):
        marked, body = _peel(node.body)
        if marked:
            return _double_buffer(node, marked, _visit(body))
    if isinstance(node, Attr) and node.key == "double_buffer":
        return _visit(node.body)  # not refilled by a serial loop: a plain allocation
    return map_children(node, _visit)


def _peel(body: Stmt) -> tuple[list[tuple[Allocate, int, str]], Stmt]:
    layers: list[tuple[Allocate, int, str]] = []
    while (
        isinstance(body, Attr) and body.key == "double_buffer" and isinstance(body.body, Allocate)
    ):
        value = body.value if isinstance(body.value, tuple) else (body.value, 2)
        sync = value[2] if len(value) > 2 else "barrier"
        layers.append((body.body, int(value[1]), sync))
        body = body.body.body
    return layers, body


def _double_buffer(loop: For, marked: list[tuple[Allocate, int, str]], body: Stmt) -> Stmt:
    layers = [a for a, _, _ in marked]
    stages_of = {id(a.buffer): n for a, n, _ in marked}
    mbarrier = any(sync.startswith("mbarrier") for *_, sync in marked)
    lag = int(any(sync == "mbarrier_lag" for *_, sync in marked))
    buffers = {id(a.buffer): a for a in layers}
    stmts = list(body.stmts) if isinstance(body, Seq) else [body]
    fills: list[Stmt] = []
    while stmts and _writes(stmts[0], buffers) and not _reads(stmts[0], buffers):
        fills.append(stmts.pop(0))
    if not fills or not stmts:
        return _restore(loop, layers, body)
    fill, rest = seq(*fills), seq(*stmts)
    stages = max(stages_of.values())
    k = loop.var
    first = loop.min
    last = loop.min + loop.extent
    ahead = stages - 1

    def slot(iteration: Expr) -> Expr:
        return (iteration - first) % stages

    def fill_at(iteration: Expr) -> Stmt:
        return _offset(substitute(fill, {k: iteration}), buffers, slot(iteration), stores=True)

    def committed(body: Stmt) -> Stmt:
        return Attr("async_commit", 0, body)

    if mbarrier:
        compute = _offset(rest, buffers, slot(k), stores=False)
        out = _mbarrier_pipeline(loop, layers, fill_at, compute, stages, lag)
        for alloc in reversed(layers):
            out = Allocate(alloc.buffer, alloc.extent * stages, out)
        return out

    prologue = []
    for s in range(ahead):
        at = first + s
        known = isinstance(loop.extent, Const) and int(loop.extent.value) > s
        prologue.append(committed(fill_at(at) if s == 0 or known else IfThenElse(LT(at, last), fill_at(at))))  # fmt: skip
    prefetch = committed(IfThenElse(LT(k + ahead, last), fill_at(k + ahead)))
    compute = _offset(rest, buffers, slot(k), stores=False)
    new_loop = For(
        k,
        loop.min,
        loop.extent,
        seq(
            Attr("async_wait", stages - 2, Sync()),
            *((compute, prefetch) if FILL_LAST and stages > 2 else (prefetch, compute)),
        ),  # fmt: skip
        loop.kind,
        loop.thread_tag,
        loop.pragmas,
    )
    out: Stmt = Attr(
        "double_buffer_managed",
        tuple(a.buffer.name for a in layers),
        seq(*prologue, new_loop, Sync()),
    )
    for alloc in reversed(layers):
        out = Allocate(alloc.buffer, alloc.extent * stages, out)
    return out


def _mbarrier_pipeline(
    loop: For, layers: list[Allocate], fill_at, compute: Stmt, stages: int, lag: int = 0
):
    """The pipeline synchronized by a pair of mbarriers per slot instead of block barriers:

        init full[N] (one arrival a thread), empty[N] (one a warp); barrier
        for s in range(N - 1): fill(slot s); arrive full[s] when its copies land
        for ko in range(n):
            wait full[ko % N] (phase ko // N)
            compute(slot ko % N); arrive empty[ko % N]
            if ko + N - 1 < n:
                if ko > 0: wait empty[(ko - 1) % N] (phase (ko - 1) // N): all warps are done
                fill(slot (ko + N - 1) % N); arrive full[...] when its copies land
        (with `lag`: drain, waiting for the compute's last reads)
        barrier

    A warp waits for nobody at the top of a step unless the copies it reads are late, and
    before a refill only for warps a whole step behind it. With 2 stages the refill goes first
    (else nothing would overlap it). With `lag` 1 (sync="mbarrier_lag", 3+ stages) step ko
    arrives on empty[(ko - 1) % N] instead: its compute returns still reading its own slot and
    has waited for step ko - 1's reads to finish; the refill then waits on the same barrier."""
    k, first, last = loop.var, loop.min, loop.min + loop.extent
    ahead = stages - 1
    name = f"{layers[0].buffer.name}_mbar"

    def slot(iteration: Expr) -> Expr:
        return (iteration - first) % stages

    def phase(iteration: Expr) -> Expr:
        return ((iteration - first) // stages) % 2

    def mark(key: str, value: tuple, body: Stmt | None = None) -> Stmt:
        return Attr(key, (name, *value), body if body is not None else Evaluate(const(0)))

    prologue = []
    for s in range(ahead):
        at = first + s
        known = isinstance(loop.extent, Const) and int(loop.extent.value) > s
        filled = mark("mbarrier_fill", (const(s),), fill_at(at))
        prologue.append(filled if s == 0 or known else IfThenElse(LT(at, last), filled))
    nxt = k + ahead
    refill = IfThenElse(
        LT(nxt, last),
        seq(
            IfThenElse(LT(first, k), mark("mbarrier_wait", ("empty", slot(k - 1), phase(k - 1)))),
            mark("mbarrier_fill", (slot(nxt),), fill_at(nxt)),
        ),
    )
    step = [
        mark("mbarrier_wait", ("full", slot(k), phase(k))),
        compute,
        mark("mbarrier_arrive", ("empty", slot(k)))
        if not lag
        else IfThenElse(LT(first, k), mark("mbarrier_arrive", ("empty", slot(k - 1)))),
    ]
    step = [refill, *step] if stages == 2 else [*step, refill]
    new_loop = For(k, loop.min, loop.extent, seq(*step), loop.kind, loop.thread_tag, loop.pragmas)
    # with `lag`, the last step's compute may still be reading: wait for it before the barrier,
    # so that past it nothing reads the tiles (and their bytes may be reused: cuda_shared.py)
    drain = [mark("pipeline_drain", ())] if lag else []
    body = seq(*prologue, new_loop, *drain, Sync())
    return Attr(
        "double_buffer_managed",
        tuple(a.buffer.name for a in layers),
        mark("mbarrier_init", (stages,), body),
    )


def _restore(loop: For, layers: list[Allocate], body: Stmt) -> Stmt:
    for alloc in reversed(layers):
        body = Allocate(alloc.buffer, alloc.extent, body)
    return For(loop.var, loop.min, loop.extent, body, loop.kind, loop.thread_tag, loop.pragmas)


def _written_address(n: Any, buffers: dict[int, Allocate]) -> bool:
    """An extern call's write-only pointer into a tile (a tensorized fill's destination)."""
    return isinstance(n, AddressOf) and n.access == "w" and id(n.load.buffer) in buffers


def _writes(s: Stmt, buffers: dict[int, Allocate]) -> bool:
    return any(
        (isinstance(n, BufferStore) and id(n.buffer) in buffers) or _written_address(n, buffers)
        for n in walk(s)
    )


def _reads(s: Stmt, buffers: dict[int, Allocate]) -> bool:
    written = {id(n.load) for n in walk(s) if _written_address(n, buffers)}
    return any(
        isinstance(n, BufferLoad) and id(n.buffer) in buffers and id(n) not in written
        for n in walk(s)
    )


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
        if stores and _written_address(n, buffers):  # a tensorized fill's destination
            load = n.load
            return AddressOf(BufferLoad(load.buffer, (shifted(load.buffer, load.indices[0]),)), "w")
        if stores and isinstance(n, BufferStore) and id(n.buffer) in buffers:
            return BufferStore(n.buffer, (shifted(n.buffer, n.indices[0]),), n.value, n.predicate)
        if not stores and isinstance(n, BufferLoad) and id(n.buffer) in buffers:
            return BufferLoad(n.buffer, (shifted(n.buffer, n.indices[0]),), n.predicate)
        return None

    return rewrite(s, rule)


__all__ = ["inject_double_buffer", "const"]
