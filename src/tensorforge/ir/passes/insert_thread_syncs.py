"""insert_thread_syncs: put `Sync()` (`__syncthreads()`) between conflicting shared-memory accesses.

A shared buffer written by some threads and then read (or rewritten) by others needs a barrier
in between. The pass walks each statement sequence in program order, tracking the shared
buffers written and read since the last barrier; before a statement that reads a buffer written
since then (read-after-write), or writes one read or written since then (write-after-read,
write-after-write), it inserts a Sync. Loops are walked twice, with the state at the end of the
body flowing back to its top, so the next iteration's writes wait for this iteration's reads;
a conflict between a loop and what precedes it is settled by one Sync before the loop.

A barrier must be reached by every thread of the block, so syncs go only where control flow
is uniform: inside THREAD_BINDING loops (which are not loops at run time), serial loops whose
bounds do not depend on threadIdx, and `if`s whose condition does not. A divergent `if` (or
loop) is treated as a single access: its syncs go before and after it, never inside.
Conservative: two accesses of one buffer always conflict (indices are not compared).

`Attr("double_buffer", ...)` is accepted and ignored (no double buffering yet: its body is
handled like any other).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tensorforge.ir.expr import BufferLoad
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
from tensorforge.ir.visit import walk
from tensorforge.te import expr as E

_MAX_LOOP_PASSES = 4


@dataclass(frozen=True)
class _Pending:
    """Shared buffers (by name) written / read since the last barrier."""

    writes: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()

    def __or__(self, other: "_Pending") -> "_Pending":
        return _Pending(self.writes | other.writes, self.reads | other.reads)

    def conflicts(self, access: "_Pending") -> bool:
        return bool(access.reads & self.writes or access.writes & (self.writes | self.reads))


_EMPTY = _Pending()


def insert_thread_syncs(stmt: Stmt) -> Stmt:
    """`stmt` with a Sync wherever threads would race on a "shared" buffer (see module doc)."""
    if not any(_is_shared_access(n) for n in walk(stmt)):
        return stmt  # NOTE: the common CPU/GPU case without shared memory costs one walk
    new, _ = _Planner().visit(stmt, _EMPTY)
    return new


def _is_shared_access(node: object) -> bool:
    return isinstance(node, (BufferLoad, BufferStore)) and node.buffer.scope == "shared"


def _accesses(node: object) -> _Pending:
    """The shared buffers `node` (a statement or expression, and everything under it) touches."""
    writes, reads = set(), set()
    for n in walk(node):
        if isinstance(n, BufferStore) and n.buffer.scope == "shared":
            writes.add(n.buffer.name)
        elif isinstance(n, BufferLoad) and n.buffer.scope == "shared":
            reads.add(n.buffer.name)
    return _Pending(frozenset(writes), frozenset(reads))


class _Planner:
    def __init__(self) -> None:
        self.thread_vars: set[int] = set()  # ids of Vars that differ between threads of a block

    def visit(self, s: Stmt, state: _Pending) -> tuple[Stmt, _Pending]:
        match s:
            case Sync():
                return s, _EMPTY
            case Seq(stmts=stmts):
                out = []
                for child in stmts:
                    new, state = self.visit(child, state)
                    out.append(new)
                return Seq(tuple(out)) if out else s, state
            case For(kind=LoopKind.THREAD_BINDING):
                # one iteration per thread: not a loop at run time, so no back edge; a conflict
                # with what came before goes before the loop (outside any guard codegen adds)
                if s.thread_tag.startswith("threadIdx"):
                    self.thread_vars.add(id(s.var))
                prefix = None
                if state.conflicts(_accesses(s.body)):
                    prefix, state = Sync(), _EMPTY
                body, state = self.visit(s.body, state)
                loop = _replace(s, body=body)
                return (seq(prefix, loop) if prefix else loop), state
            case For() if self._uniform(s.min) and self._uniform(s.extent):
                return self._loop(s, state)
            case IfThenElse(condition=c, then_case=t, else_case=e) if self._uniform(c):
                # NOTE: a uniform condition has no loads, so evaluating it cannot conflict
                then_case, then_state = self.visit(t, state)
                if e is None:
                    return _replace(s, then_case=then_case), then_state | state
                else_case, else_state = self.visit(e, state)
                return _replace(s, then_case=then_case, else_case=else_case), then_state | else_state
            case LetStmt(var=var, value=value, body=body):
                prefix, state = self._before(value, state)
                if not self._uniform(value):
                    self.thread_vars.add(id(var))
                body, state = self.visit(body, state)
                return seq(prefix, _replace(s, body=body)) if prefix else _replace(s, body=body), state
            case Allocate() | Attr():
                body, state = self.visit(s.body, state)
                return _replace(s, body=body), state
        # anything else is one access: a store, an allreduce, a divergent if or loop
        return self._atomic(s, state)

    def _atomic(self, s: Stmt, state: _Pending) -> tuple[Stmt, _Pending]:
        access = _accesses(s)
        if isinstance(s, ThreadAllReduce):  # its results are local; only its values read memory
            access = _Pending(frozenset(), _reads_of(s.values))
        if state.conflicts(access):
            return Seq((Sync(), s)), access
        return s, state | access

    def _before(self, e: E.Expr, state: _Pending) -> tuple[Stmt | None, _Pending]:
        """A Sync to put before a statement that evaluates `e` first, if `e` reads a pending write."""
        access = _Pending(frozenset(), _reads_of((e,)))
        if state.conflicts(access):
            return Sync(), access
        return None, state | access

    def _loop(self, s: For, state: _Pending) -> tuple[Stmt, _Pending]:
        # A conflict with what came before the loop is settled once, before it, rather than on
        # every iteration (a tile read in an unrolled inner loop must not sync per step).
        prefix = None
        if state.conflicts(_accesses(s.body)):
            prefix, state = Sync(), _EMPTY
        entry = state
        body, end = self.visit(s.body, entry)
        for _ in range(_MAX_LOOP_PASSES):
            back = entry | end  # the next iteration starts where this one ended
            body, new_end = self.visit(s.body, back)
            if new_end == end:
                break
            end = new_end
        else:  # NOTE: not settled (never seen): a barrier at the top of every iteration is safe
            body, end = self.visit(s.body, _EMPTY)
            body = seq(Sync(), body)
        loop = _replace(s, body=body)
        return (seq(prefix, loop) if prefix else loop), state | end

    def _uniform(self, e: E.Expr) -> bool:
        """True if `e` has the same value in every thread of a block (conservatively)."""
        for n in walk(e):
            if isinstance(n, BufferLoad):
                return False
            if isinstance(n, E.Var) and id(n) in self.thread_vars:
                return False
        return True


def _reads_of(exprs: tuple[E.Expr, ...]) -> frozenset[str]:
    return frozenset(
        n.buffer.name for e in exprs for n in walk(e) if isinstance(n, BufferLoad) and n.buffer.scope == "shared"
    )


def _replace(s: Stmt, **changes: object) -> Stmt:
    if all(getattr(s, k) is v for k, v in changes.items()):
        return s
    return dataclasses.replace(s, **changes)
