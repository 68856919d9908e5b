"""Give every thread loop its launch extent; guard the body where the loop was smaller.

A kernel launches, per thread tag (threadIdx.x, blockIdx.y, ...), the largest constant extent of
the loops bound to it: sibling stages under one block share the launch. A loop bound to fewer
threads than that runs its body only where its index is below its own extent:

    for tx in threadIdx.x(64): body        (launched with 128 along threadIdx.x)
 -> for tx in threadIdx.x(128): if tx < 64: body

A body with barriers (Sync, ThreadAllReduce) cannot sit under a divergent `if`: the guard is
pushed down around the barrier-free pieces instead, and a ThreadAllReduce gets the guard as its
`condition` (those threads join the barrier and contribute the identity). Symbolic extents are
left alone: every loop of such a tag must have the same extent (codegen checks it).
"""

from __future__ import annotations

import dataclasses

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.stmt import (
    For,
    IfThenElse,
    KernelLaunch,
    LetStmt,
    LoopKind,
    Stmt,
    Sync,
    ThreadAllReduce,
)
from tensorforge.ir.visit import map_children, rewrite, walk
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E


def guard_thread_extents(stmt: Stmt) -> Stmt:
    """Each kernel's thread loops take their tag's launch extent, guarded where smaller."""
    if any(isinstance(n, KernelLaunch) for n in walk(stmt)):
        return rewrite(
            stmt,
            lambda n: (
                dataclasses.replace(n, body=_guard_kernel(n.body))
                if isinstance(n, KernelLaunch)
                else None
            ),
        )
    return _guard_kernel(stmt)


def launch_extents(body: Stmt) -> dict[str, int]:
    """Per thread tag, the largest constant extent bound to it (tags with a symbolic one left out)."""
    extents: dict[str, int] = {}
    symbolic: set[str] = set()
    for n in walk(body):
        if isinstance(n, For) and n.kind is LoopKind.THREAD_BINDING:
            if isinstance(n.extent, E.Const):
                extents[n.thread_tag] = max(extents.get(n.thread_tag, 0), int(n.extent.value))
            else:
                symbolic.add(n.thread_tag)
    return {tag: ext for tag, ext in extents.items() if tag not in symbolic}


def _guard_kernel(body: Stmt) -> Stmt:
    extents = launch_extents(body)

    def rule(node: object) -> Stmt | None:
        match node:
            case For(kind=LoopKind.THREAD_BINDING, extent=E.Const(value=v)) if int(v) < extents.get(
                node.thread_tag, 0
            ):
                size = E.Const(int(v), node.var.dtype)
                zero_min = isinstance(node.min, E.Const) and int(node.min.value) == 0
                condition = E.LT(node.var, size if zero_min else E.Add(node.min, size))
                launched = E.Const(extents[node.thread_tag], node.extent.dtype)
                return dataclasses.replace(
                    node, extent=launched, body=push_guard(node.body, condition)
                )
        return None

    return rewrite(body, rule)


def has_barrier(s: Stmt) -> bool:
    return any(isinstance(n, (Sync, ThreadAllReduce)) for n in walk(s))


def push_guard(s: Stmt, condition: E.Expr) -> Stmt:
    """`if condition: s`, with every barrier inside `s` still reached by all threads."""
    if not has_barrier(s):
        return IfThenElse(condition, s)
    match s:
        case Sync():
            return s
        case ThreadAllReduce(condition=None):
            return dataclasses.replace(s, condition=condition)
        case ThreadAllReduce():
            return dataclasses.replace(s, condition=E.And(s.condition, condition))
        case LetStmt(var=var, value=value, body=body):
            if dt.lanes_of(var.dtype) == 1 and any(isinstance(n, BufferLoad) for n in walk(value)):
                value = E.Select(condition, value, E.Const(0, var.dtype))  # no stray loads
            return LetStmt(var, value, push_guard(body, condition))
    return map_children(s, lambda c: push_guard(c, condition) if isinstance(c, Stmt) else c)
