"""Virtual threads (`bind(axis, te.thread_axis("vthread"))`) become interleaved copies in one thread.

A loop bound to "vthread" says its iterations behave like separate threads: each keeps its own
per-thread ("local") storage, and they meet only at barriers. One real thread runs them all:

- every allocation inside the loop except shared memory gets one copy per virtual thread
  (extent x n, accesses offset by `v * extent`), so the copies never share registers;
- the loop is pushed down through statements that do not depend on it (a shared-memory fill,
  whose region was relaxed over the virtual threads, or a barrier, runs once), and each
  statement that does depend on it is repeated n times with `v` = 0 .. n-1.

So `for vx in vthread(2): for k: fill shared; sync; acc[i] += ...` becomes
`for k: fill shared; sync; acc[i] += ...; acc[4 + i] += ...` (with `acc` twice as long): the
shared tile is loaded once for both virtual threads, and their independent updates interleave
(instruction-level parallelism), as in TVM's GEMM tutorials.
"""

from __future__ import annotations

import dataclasses

from tensorforge.errors import LoweringError
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Seq,
    Stmt,
    Sync,
    ThreadAllReduce,
    seq,
)
from tensorforge.ir.visit import rewrite, substitute, walk
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E


def inject_virtual_threads(stmt: Stmt) -> Stmt:
    """Replace every vthread loop by interleaved copies of its body (innermost loops first)."""
    return rewrite(stmt, _rule)


def _rule(node: object) -> Stmt | None:
    if isinstance(node, For) and node.kind is LoopKind.THREAD_BINDING:
        if node.thread_tag == "vthread":
            return _interleave(node)
    return None


def _interleave(loop: For) -> Stmt:
    if not isinstance(loop.extent, E.Const):
        raise LoweringError(
            f"virtual thread axis '{loop.var.name}' has extent {loop.extent}; a vthread needs a "
            f"constant extent (split by a constant, or nparts=)"
        )
    count = int(loop.extent.value)
    if any(isinstance(n, ThreadAllReduce) for n in walk(loop.body)):
        raise LoweringError(
            f"virtual thread axis '{loop.var.name}' encloses a cross-thread reduction; bind that "
            f"reduction's stage outside the vthread loops"
        )
    index = E.Sub(loop.var, loop.min) if not _is_zero(loop.min) else loop.var
    body = _expand_local(loop.body, index, count)
    return _push(body, loop.var, [_add(loop.min, i) for i in range(count)])


def _expand_local(body: Stmt, index: E.Expr, count: int) -> Stmt:
    """One copy of each non-shared allocation per virtual thread, selected by `index`."""
    offsets: dict[int, E.Expr] = {}

    def offset_of(buffer: Buffer) -> E.Expr | None:
        return offsets.get(id(buffer))

    for node in walk(body):
        if isinstance(node, Allocate) and node.buffer.scope != "shared":
            offsets[id(node.buffer)] = E.Mul(index, node.extent)
    if not offsets:
        return body

    def shift(indices: tuple[E.Expr, ...], offset: E.Expr) -> tuple[E.Expr, ...]:
        (flat,) = indices
        lanes = dt.lanes_of(flat.dtype)
        return (E.Add(flat, offset if lanes == 1 else Broadcast(offset, lanes)),)

    def rule(node: object) -> object | None:
        match node:
            case Allocate(buffer=buffer, extent=extent) if id(buffer) in offsets:
                return dataclasses.replace(node, extent=E.Mul(extent, E.Const(count, extent.dtype)))
            case BufferStore(buffer=buffer, indices=indices) if id(buffer) in offsets:
                return dataclasses.replace(node, indices=shift(indices, offset_of(buffer)))
            case BufferLoad(buffer=buffer, indices=indices) if id(buffer) in offsets:
                return dataclasses.replace(node, indices=shift(indices, offset_of(buffer)))
        return None

    return rewrite(body, rule)


def _push(s: Stmt, var: E.Var, values: list[E.Expr]) -> Stmt:
    """`s` run for each value of `var`, copies placed as deep as `var`-free statements allow."""
    if not _uses(s, var):
        return s
    match s:
        case Seq(stmts=stmts):
            return seq(*(_push(x, var, values) for x in stmts))
        case For() if not (_uses(s.min, var) or _uses(s.extent, var)):
            return dataclasses.replace(s, body=_push(s.body, var, values))
        case IfThenElse(condition=c) if not _uses(c, var):
            other = None if s.else_case is None else _push(s.else_case, var, values)
            return dataclasses.replace(
                s, then_case=_push(s.then_case, var, values), else_case=other
            )
        case Allocate() | Attr():
            return dataclasses.replace(s, body=_push(s.body, var, values))
        case LetStmt(value=value) if not _uses(value, var):
            return dataclasses.replace(s, body=_push(s.body, var, values))
    if any(isinstance(n, Sync) for n in walk(s)):
        raise LoweringError(
            f"a barrier sits under control flow that depends on virtual thread axis "
            f"'{var.name}'; the virtual threads would reach it a different number of times"
        )
    return seq(*(substitute(s, {var: value}) for value in values))


def _uses(node: object, var: E.Var) -> bool:
    return any(n is var for n in walk(node))


def _is_zero(e: E.Expr) -> bool:
    return isinstance(e, E.Const) and e.value == 0


def _add(low: E.Expr, i: int) -> E.Expr:
    return E.Const(i, low.dtype) if _is_zero(low) else E.Add(low, E.Const(i, low.dtype))
