"""insert_thread_syncs: put `Sync()` (`__syncthreads()`) between conflicting shared-memory accesses.

A shared buffer written by some threads and then read by others needs a barrier in between, and
so does a buffer read by some threads and then overwritten. The pass walks each statement
sequence in program order, tracking the shared accesses since the last barrier; before a
statement that reads what was written since then (read-after-write) or writes what was read
since then (write-after-read), it inserts a Sync. Loops are walked twice, the state at the end
of the body flowing back to its top, so the next iteration's writes wait for this iteration's
reads; a conflict between a loop and what precedes it is settled by one Sync before the loop.

Two accesses conflict when they touch the same buffer, unless both use the very same index
expression and it depends on threadIdx: then each thread touches its own element (as TVM's
storage sync assumes). Write-after-write is not a conflict (as in TVM).

A barrier must be reached by every thread of the block, so syncs go only where control flow is
uniform: inside THREAD_BINDING loops (which are not loops at run time), serial loops whose bounds
do not depend on threadIdx, and `if`s whose condition does not. A divergent `if` (or loop) is one
access as a whole: its syncs go before and after it, never inside.

Buffers inside `Attr("double_buffer_managed")` (see inject_double_buffer) are skipped: that pass
placed their barriers. Other `Attr`s are walked through; their body is
handled like any other.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    For,
    IfThenElse,
    KernelLaunch,
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

# an access: (buffer name, structural key of a thread-dependent index, or None for "anywhere")
Access = tuple[str, Any]


@dataclass(frozen=True)
class _Pending:
    """Shared accesses since the last barrier."""

    writes: frozenset[Access] = frozenset()
    reads: frozenset[Access] = frozenset()

    def __or__(self, other: _Pending) -> _Pending:
        return _Pending(self.writes | other.writes, self.reads | other.reads)

    def conflicts(self, access: _Pending) -> bool:
        return _overlap(access.reads, self.writes) or _overlap(access.writes, self.reads)


def _overlap(a: frozenset[Access], b: frozenset[Access]) -> bool:
    return any(
        name_a == name_b and (key_a is None or key_a != key_b)
        for name_a, key_a in a
        for name_b, key_b in b
    )


_EMPTY = _Pending()


def insert_thread_syncs(stmt: Stmt) -> Stmt:
    """`stmt` with a Sync wherever threads would race on a "shared" buffer (see module doc)."""
    if not any(
        isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == "shared" for n in walk(stmt)
    ):
        return stmt  # NOTE: the common case without shared memory costs one walk
    new, _ = _Planner().visit(stmt, _EMPTY)
    return new


class _Planner:
    def __init__(self) -> None:
        self.thread_vars: set[int] = set()  # ids of Vars that differ between threads of a block
        self.managed: set[str] = set()  # buffers whose barriers inject_double_buffer placed

    def visit(self, s: Stmt, state: _Pending) -> tuple[Stmt, _Pending]:
        match s:
            case Sync():
                return s, _EMPTY
            case Seq(stmts=stmts):
                out = []
                for child in stmts:
                    new, state = self.visit(child, state)
                    out.append(new)
                return _replace(s, stmts=tuple(out)), state
            case For(kind=LoopKind.THREAD_BINDING):
                # one iteration per thread: not a loop at run time, so no back edge; a conflict
                # with what came before goes before the loop (outside any guard codegen adds)
                if s.thread_tag.startswith("threadIdx"):
                    self.thread_vars.add(id(s.var))
                prefix, state = self._settle_before(s.body, state)
                body, state = self.visit(s.body, state)
                return seq(prefix, _replace(s, body=body)), state
            case For() if self._uniform(s.min) and self._uniform(s.extent):
                return self._loop(s, state)
            case IfThenElse(condition=c, then_case=t, else_case=e) if self._uniform(c):
                # NOTE: a uniform condition has no loads, so evaluating it cannot conflict
                then_case, then_state = self.visit(t, state)
                if e is None:
                    return _replace(s, then_case=then_case), then_state | state
                else_case, else_state = self.visit(e, state)
                return _replace(
                    s, then_case=then_case, else_case=else_case
                ), then_state | else_state
            case LetStmt(var=var, value=value, body=body):
                prefix, state = self._access(self.accesses(value, reads_only=True), state)
                if not self._uniform(value):
                    self.thread_vars.add(id(var))
                body, state = self.visit(body, state)
                return seq(prefix, _replace(s, body=body)), state
            case Attr(key="double_buffer_managed", value=names):
                # NOTE: managed only inside: a peeled last step after the pipeline allocates
                # tiles of the same names again, and its fill and reads need their barrier
                outer, self.managed = self.managed, self.managed | set(names)
                body, state = self.visit(s.body, state)
                self.managed = outer
                return _replace(s, body=body), state
            case KernelLaunch():  # a kernel starts with nothing pending and ends all its work
                body, _ = self.visit(s.body, _EMPTY)
                return _replace(s, body=body), _EMPTY
            case Allocate() | Attr():
                body, state = self.visit(s.body, state)
                return _replace(s, body=body), state
            case ThreadAllReduce(values=values):  # its results are local: only its values matter
                prefix, state = self._access(self.accesses(Seq(tuple(map(_Eval, values)))), state)
                return seq(prefix, s), state
        # anything else is one access: a store, a divergent if or loop
        prefix, state = self._access(self.accesses(s), state)
        return seq(prefix, s), state

    def _access(self, access: _Pending, state: _Pending) -> tuple[Stmt | None, _Pending]:
        """(Sync or None to put first, state after) for a statement doing `access` at once."""
        if state.conflicts(access):
            return Sync(), access
        return None, state | access

    def _settle_before(self, body: Stmt, state: _Pending) -> tuple[Stmt | None, _Pending]:
        if state.conflicts(self.accesses(body)):
            return Sync(), _EMPTY
        return None, state

    def _loop(self, s: For, state: _Pending) -> tuple[Stmt, _Pending]:
        # a conflict with what came before is settled once, before the loop, rather than on
        # every iteration (a tile read by an unrolled inner loop must not sync at each step)
        prefix, entry = self._settle_before(s.body, state)
        body, end = self.visit(s.body, entry)
        for _ in range(_MAX_LOOP_PASSES):
            body, new_end = self.visit(s.body, entry | end)  # iteration k+1 starts where k ended
            if new_end == end:
                break
            end = new_end
        else:  # NOTE: not settled (never seen): a barrier at the top of every iteration is safe
            body, end = self.visit(s.body, _EMPTY)
            body = seq(Sync(), body)
        return seq(prefix, _replace(s, body=body)), entry | end

    def accesses(self, node: object, reads_only: bool = False) -> _Pending:
        """The shared accesses of `node` (a statement or expression, everything under it)."""
        writes, reads = set(), set()
        # an extern call's pointer into a shared tile (a tensorized store or fill) touches a
        # region, any thread's elements: its access mode says read, write or both
        through_pointer = set()
        for n in walk(node):
            if isinstance(n, AddressOf) and n.load.buffer.scope == "shared":
                through_pointer.add(id(n.load))
                if n.load.buffer.name in self.managed:
                    continue
                if "w" in n.access and not reads_only:
                    writes.add((n.load.buffer.name, None))
                if "r" in n.access:
                    reads.add((n.load.buffer.name, None))
        for n in walk(node):
            if id(n) in through_pointer:
                continue
            if getattr(n, "buffer", None) is not None and n.buffer.name in self.managed:
                continue
            if isinstance(n, BufferStore) and n.buffer.scope == "shared" and not reads_only:
                writes.add((n.buffer.name, self._index_key(n.indices)))
            elif isinstance(n, BufferLoad) and n.buffer.scope == "shared":
                reads.add((n.buffer.name, self._index_key(n.indices)))
        return _Pending(frozenset(writes), frozenset(reads))

    def _index_key(self, indices: tuple[E.Expr, ...]) -> Any:
        """A key equal for accesses that surely hit the calling thread's own element, else None."""
        if len(indices) != 1 or "x" in indices[0].dtype:
            return None
        if not any(isinstance(n, E.Var) and id(n) in self.thread_vars for n in walk(indices[0])):
            return None  # the same element in every thread
        if any(isinstance(n, BufferLoad) for n in walk(indices[0])):
            return None  # indirect: who knows whose element
        return E.structural_key(indices[0])

    def _uniform(self, e: E.Expr) -> bool:
        """True if `e` has the same value in every thread of a block (conservatively)."""
        for n in walk(e):
            if isinstance(n, BufferLoad):
                return False
            if isinstance(n, E.Var) and id(n) in self.thread_vars:
                return False
        return True


@dataclass(frozen=True)
class _Eval(Stmt):
    """An expression seen as a statement, for `accesses` of a ThreadAllReduce's values."""

    value: E.Expr


def _replace(s: Stmt, **changes: object) -> Stmt:
    if all(getattr(s, k) is v for k, v in changes.items()):
        return s
    return dataclasses.replace(s, **changes)
