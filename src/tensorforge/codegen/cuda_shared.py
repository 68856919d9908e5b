"""Where each shared array of a CUDA kernel lives in its dynamic shared memory: arrays whose
lifetimes are apart, with a block barrier between them, share bytes.

A tensor-core product's kernel fills its A and B tiles through a k-loop pipeline, then stores
its accumulators into a float32 tile that the epilogue reads. The pipeline's tiles are dead by
then, so the float32 tile can take their bytes: a 128 x 128 wgmma block then needs 96 KiB (3
stages) instead of 164, and two blocks share an SM (TVM merges dynamic shared allocations by
liveness the same way).

The kernel body is read as a sequence of events in program order (statements that touch shared
arrays, and barriers). Arrays X and Y may overlap when
- no serial loop encloses accesses of both (a loop's next iteration would come back to X), and
- a barrier that every thread reaches (in no serial loop, under no `if`, waiting for all
  cp.async copies) lies after X's last access and before Y's first, or the other way round.
An access is a load, a store, an address or the whole array passed to a call. An array that
wgmma reads (asynchronously) stays alive until the next wait for all of them (the pipeline's
drain) that every thread runs; one that bulk row copies fill, or bulk tensor copies multicast to a
cluster, never shares (a block's own bulk tensor copies have all landed by the k loop's end).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tensorforge.codegen.cuda_intrin import ASYNC_READ_CALLS, TMA_LOADS
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.extern import WholeBuffer
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
)
from tensorforge.ir.visit import walk
from tensorforge.te.expr import Const
from tensorforge.te.extern_call import ExternCall

DRAINS = ("tf_wgmma_wait_all",)  # waits for all of them (so does Attr "pipeline_drain")
# filled or read by the copy engine (bulk row copies, bulk tensor stores, and bulk tensor copies
# multicast to a cluster: other blocks' copies); a block's own bulk tensor copies into a
# pipeline's tiles have all landed once its k loop is done (each waited on through the full
# mbarrier before the tile is read: the copies of k steps past the last are never issued)
NEVER_SHARED = ("tf_bulk_rows", "tf_tma_store")


def multicast(name: str) -> bool:
    """A bulk tensor copy shared by the blocks of a cluster (tf_tma_sw128<ROWS, COLS, CLUSTER>)."""
    return name.startswith(TMA_LOADS) and not name.replace(" ", "").endswith(",1>")


@dataclass
class _Lifetime:
    first: int = -1
    last: int = -1
    async_read_at: int = -1  # the last event that starts an asynchronous read
    loops: set[int] = field(default_factory=set)
    alone: bool = False  # never shares


class _Events:
    """The kernel body as numbered events: shared accesses per array, and usable barriers."""

    def __init__(self, body: Stmt, arrays: set[int]) -> None:
        self.arrays = arrays  # ids of the shared Allocates
        self.shared: dict[int, int] = {}  # id(buffer) -> id(the Allocate whose body we are in)
        self.count = 0
        self.barriers: list[int] = []
        self.drains: list[int] = []
        self.lives: dict[int, _Lifetime] = {key: _Lifetime() for key in arrays}
        self._visit(body, (), uniform=True, waits_all=True)

    def _event(self, loops: tuple[int, ...], uniform: bool, *nodes) -> None:
        index, self.count = self.count, self.count + 1
        inner = [n for node in nodes for n in walk(node)]
        calls = [n for n in inner if isinstance(n, ExternCall)]
        if uniform and any(c.name.startswith(DRAINS) for c in calls):
            self.drains.append(index)
        touched = {  # (a load, a store, an address, an array an extern call takes whole)
            self.shared[id(n.buffer)]
            for n in inner
            if isinstance(n, (BufferLoad, BufferStore, WholeBuffer)) and id(n.buffer) in self.shared
        }
        reads_async = any(c.name.startswith(ASYNC_READ_CALLS) for c in calls)
        alone = any(c.name.startswith(NEVER_SHARED) or multicast(c.name) for c in calls)
        for key in touched:
            life = self.lives[key]
            life.first = index if life.first < 0 else life.first
            life.last = index
            life.loops.update(loops)
            life.async_read_at = index if reads_async else life.async_read_at
            life.alone = life.alone or alone

    def _visit(self, s: Stmt, loops: tuple[int, ...], uniform: bool, waits_all: bool) -> None:
        """`uniform`: every thread of the block runs `s` (under no `if`, in no loop that may
        take no step); `waits_all`: a barrier here waits for all cp.async copies."""
        match s:
            case Seq(stmts=stmts):
                for child in stmts:
                    self._visit(child, loops, uniform, waits_all)
            case For(kind=LoopKind.THREAD_BINDING, body=body):
                self._visit(body, loops, uniform, waits_all)
            case For(body=body):
                self._event(loops, uniform, s.min, s.extent)
                steps = isinstance(s.extent, Const) and s.extent.value > 0
                self._visit(body, (*loops, id(s)), uniform and steps, waits_all)
            case Allocate(buffer=buffer, body=body) if id(s) in self.arrays:
                outer = self.shared.get(id(buffer))
                self.shared[id(buffer)] = id(s)
                self._visit(body, loops, uniform, waits_all)
                if outer is None:
                    del self.shared[id(buffer)]
                else:
                    self.shared[id(buffer)] = outer
            case Allocate(body=body):
                self._visit(body, loops, uniform, waits_all)
            case LetStmt(value=value, body=body):
                self._event(loops, uniform, value)
                self._visit(body, loops, uniform, waits_all)
            case IfThenElse(condition=condition, then_case=then, else_case=other):
                self._event(loops, uniform, condition)
                self._visit(then, loops, False, waits_all)
                if other is not None:
                    self._visit(other, loops, False, waits_all)
            case Attr(key="pipeline_drain"):
                if uniform:
                    self.drains.append(self.count)
                self.count += 1
            case Attr(key="async_wait", body=body):  # cp.async.wait_group N, even N = 0,
                # waits for committed groups only (a plain barrier prints cp.async.wait_all)
                self._visit(body, loops, uniform, False)
            case Attr(body=body):  # (an annotation: its value touches no array)
                self._visit(body, loops, uniform, waits_all)
            case Sync():
                if uniform and waits_all and not loops:
                    self.barriers.append(self.count)
                self.count += 1
            case _:
                self._event(loops, uniform, s)

    def end(self, key: int) -> int:
        """The last event of the array's lifetime (an asynchronous read lasts until a drain)."""
        life = self.lives[key]
        if life.async_read_at < 0:
            return life.last
        after = [d for d in self.drains if d > life.async_read_at]
        return max(life.last, after[0]) if after else self.count

    def apart(self, x: int, y: int) -> bool:
        """Whether arrays x and y (Allocate ids) may share bytes."""
        lx, ly = self.lives[x], self.lives[y]
        if lx.alone or ly.alone or lx.first < 0 or ly.first < 0 or lx.loops & ly.loops:
            return False
        if ly.first < lx.first:
            x, y, lx, ly = y, x, ly, lx
        end = self.end(x)
        return any(end < b < ly.first for b in self.barriers)


def plan_offsets(body: Stmt, sizes: list[tuple[int, int]], align: int) -> dict[int, int]:
    """Offsets of the shared arrays `sizes` (Allocate id, bytes; in program order) in one block
    of shared memory: each at the lowest aligned offset that overlaps no array it may not share
    with. Where none may share, they lie one after another."""
    events = _Events(body, {key for key, *_ in sizes})
    placed: list[tuple[int, int, int]] = []  # (key, offset, end)
    offsets = {}
    for key, size in sizes:
        size = -(-size // align) * align
        blocking = [(o, e) for k, o, e in placed if not events.apart(k, key)]
        offset = 0
        for start, stop in sorted(blocking):
            if offset + size <= start:
                break
            offset = max(offset, stop)
        offsets[key] = offset
        placed.append((key, offset, offset + size))
    return offsets


def shared_arrays(body: Stmt) -> list[Allocate]:
    """The shared Allocates of a kernel, in program order."""
    return [n for n in walk(body) if isinstance(n, Allocate) and n.buffer.scope == "shared"]
