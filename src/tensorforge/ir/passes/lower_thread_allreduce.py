"""ThreadAllReduce -> warp shuffles, shared scratch memory and barriers, as plain loop IR.

The reduction runs over the threads along one tag (`threadIdx.x`, say), separately for each
group of threads that share the other thread indices. Three strategies, picked from the launch:

- "warp": the reduced threads of a group sit in one warp (x-axis, at most 32 of them, a power of
  two or a single group): shuffle down to the group's first lane, then broadcast.
- "warps+shared": x-axis, groups made of whole warps (or one group): shuffle within each warp,
  one partial per warp in shared memory, then combine the partials.
- "shared-tree": anything else (y/z axes, groups straddling warps): a tree in shared memory.

    red[0] = thread_allreduce_sum(x, over=threadIdx.x, threads=32)
 -> red[0] = x
    other = warp_shuffle_down(0xffffffff, red[0], 16, 32); red[0] = red[0] + other
    ...                                                     (offsets 8, 4, 2, 1)
    red[0] = warp_shuffle(0xffffffff, red[0], 0, 32)

Threads at or beyond `extent` (and threads where the reduction's `condition` is false)
contribute the identity. The left operand of every combine comes from the lower thread index, so
a reducer that breaks ties by its left side (argmax keeping the first index) gives the same
answer as a scan. The `results` buffers are the working registers: every thread ends with the
combined tuple in them. Runs after guard_thread_extents (every thread loop has its launch
extent, and a guard pushed into a reduction is its `condition`), per kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tensorforge.errors import LoweringError
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.gpu_intrin import thread_index, warp_shuffle, warp_shuffle_down
from tensorforge.ir.passes.guard_thread_extents import launch_extents
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    For,
    IfThenElse,
    KernelLaunch,
    LetStmt,
    LoopKind,
    Stmt,
    Sync,
    ThreadAllReduce,
    seq,
)
from tensorforge.ir.visit import rewrite, walk
from tensorforge.te.expr import (
    EQ,
    LT,
    Add,
    And,
    CommReducer,
    Const,
    Expr,
    FloorDiv,
    FloorMod,
    Mul,
    Select,
    Sub,
    Var,
)

ATTR_KEY = "thread_allreduce"  # names the strategy above each lowered reduction
FULL_MASK = Const(0xFFFFFFFF, "uint32")

# A block of code under construction: statements, and (var, value) lets that scope the rest.
Item = Stmt | tuple[Var, Expr]


def lower_thread_allreduce(stmt: Stmt) -> Stmt:
    """Every ThreadAllReduce of each kernel becomes shuffles, shared scratch and barriers."""
    if any(isinstance(n, KernelLaunch) for n in walk(stmt)):
        return rewrite(
            stmt,
            lambda n: (
                dataclasses.replace(n, body=_lower_kernel(n.body))
                if isinstance(n, KernelLaunch)
                else None
            ),
        )
    return _lower_kernel(stmt)


def _lower_kernel(body: Stmt) -> Stmt:
    if not any(isinstance(n, ThreadAllReduce) for n in walk(body)):
        return body
    extents = launch_extents(body)
    symbolic = {
        n.thread_tag
        for n in walk(body)
        if isinstance(n, For) and n.kind is LoopKind.THREAD_BINDING and n.thread_tag not in extents
    }
    block = tuple(extents.get(f"threadIdx.{a}", 1) for a in "xyz")

    def rule(node: object) -> Stmt | None:
        if isinstance(node, ThreadAllReduce):
            if node.thread_tag in symbolic:
                raise LoweringError(
                    f"ThreadAllReduce over {node.thread_tag}: the threads along it have a symbolic "
                    f"count; bind a loop of constant extent to {node.thread_tag}"
                )
            return _Lowering(node, block).run()
        return None

    return rewrite(body, rule)


def plan_strategy(s: ThreadAllReduce, block: tuple[int, ...]) -> str:
    """ "none" | "warp" | "warps+shared" | "shared-tree" for `s` in a block of `block` threads."""
    if not s.thread_tag.startswith("threadIdx."):
        raise LoweringError(
            f"ThreadAllReduce over {s.thread_tag}: only threadIdx.x/y/z can be reduced"
        )
    axis = "xyz".index(s.thread_tag[-1])
    width = block[axis]
    if s.extent > width:
        raise LoweringError(
            f"ThreadAllReduce over {s.thread_tag} has extent {s.extent}, but the kernel launches "
            f"only {width} threads along it (bind a loop of that extent to {s.thread_tag})"
        )
    groups = block[0] * block[1] * block[2] // width
    if width == 1:
        return "none"
    if axis == 0 and width <= 32 and (_is_pow2(width) or groups == 1):
        return "warp"
    if axis == 0 and (width % 32 == 0 or groups == 1):
        return "warps+shared"
    return "shared-tree"


class _Lowering:
    """The statements that replace one ThreadAllReduce `s` in a block of `block` threads."""

    def __init__(self, s: ThreadAllReduce, block: tuple[int, ...]) -> None:
        c = s.combiner
        if len(c.lhs) != len(s.values) or len(s.results) != len(s.values):
            raise LoweringError(
                f"ThreadAllReduce({c.name}): {len(s.values)} values and {len(s.results)} results "
                f"for a {len(c.lhs)}-value reducer"
            )
        self.s, self.block = s, block
        self.combiner: CommReducer = c
        self.axis = s.thread_tag[-1]
        self.width = block["xyz".index(self.axis)]
        self.total = block[0] * block[1] * block[2]
        self.strategy = plan_strategy(s, block)
        self.scratch: list[Buffer] = []  # shared arrays, allocated around the whole reduction

    # -- the registers --------------------------------------------------------------------------
    def current(self) -> tuple[Expr, ...]:
        return tuple(BufferLoad(r, (Const(0),)) for r in self.s.results)

    def assign(self, values: tuple[Expr, ...]) -> list[Item]:
        """results = values (all values read before any result is written)."""
        if len(values) == 1:
            return [BufferStore(self.s.results[0], (Const(0),), values[0])]
        temps = [Var("red_new", v.dtype) for v in values]
        return [*zip(temps, values), *self.assign_each(tuple(temps))]

    def assign_each(self, values: tuple[Expr, ...]) -> list[Item]:
        return [BufferStore(r, (Const(0),), v) for r, v in zip(self.s.results, values)]

    def combine_with(self, others: tuple[Expr, ...]) -> list[Item]:
        """results = combine(results, others): the left operand is the lower thread's."""
        return self.assign(self.combiner.combine(self.current(), others))

    # -- the strategies -------------------------------------------------------------------------
    def run(self) -> Stmt:
        s = self.s
        r = thread_index(self.axis)
        conditions = [LT(r, Const(s.extent))] if s.extent < self.width else []
        if s.condition is not None:
            conditions.append(s.condition)
        if conditions:
            active = conditions[0] if len(conditions) == 1 else And(conditions[0], conditions[1])
            items: list[Item] = [
                *self.assign_each(self.combiner.identity),
                IfThenElse(active, _block(self.assign(s.values))),
            ]
        else:
            items = self.assign(s.values)
        steps: dict[str, Callable[[], list[Item]]] = {
            "none": list,
            "warp": self.warp,
            "warps+shared": self.warps_and_shared,
            "shared-tree": self.shared_tree,
        }
        body = _block(items + steps[self.strategy]())
        for buf in reversed(self.scratch):
            body = Allocate(buf, buf.shape[0], body)
        note = (
            f"{self.combiner.name} over {s.thread_tag}: {s.extent} of {self.width} threads, "
            f"{self.strategy}"
        )
        return Attr(ATTR_KEY, note, body)

    def warp(self) -> list[Item]:
        mask = Var("red_mask", "uint32")
        lanes = self.width if _is_pow2(self.width) else 32
        valid = None if _is_pow2(self.width) else Const(self.width)
        r = thread_index(self.axis)
        return [
            (mask, self.warp_mask()),
            *self.warp_reduce(mask, self.width, lanes, r, valid),
            *self.broadcast(mask, lanes),
        ]

    def warps_and_shared(self) -> list[Item]:
        warps = -(-self.width // 32)
        full = self.width % 32 == 0
        groups = self.total // self.width
        tid = self.linear_tid()
        lane, warp, mask = Var("red_lane"), Var("red_warp"), Var("red_mask", "uint32")
        items: list[Item] = [
            (lane, FloorMod(tid, Const(32))),
            (warp, FloorDiv(tid, Const(32))),
            (mask, self.warp_mask()),
        ]
        valid: Expr | None = None
        if not full:  # one group whose last warp is partial
            last = Const(self.width - 32 * (warps - 1))
            valid = Select(EQ(warp, Const(warps - 1)), last, Const(32))
        items += self.warp_reduce(mask, 32, 32, lane, valid)
        bufs = self.scratch_buffers(warps * groups)
        zero = (Const(0),)
        items += [
            IfThenElse(
                EQ(lane, Const(0)),
                seq(*(BufferStore(b, (warp,), v) for b, v in zip(bufs, self.current()))),
            ),
            Sync(),
        ]
        if full:
            first = Var("red_first")
            partials = tuple(BufferLoad(b, (Add(first, lane),)) for b in bufs)
            items += [
                (first, Mul(FloorDiv(warp, Const(warps)), Const(warps))),
                *self.assign_each(self.combiner.identity),
                IfThenElse(LT(lane, Const(warps)), _block(self.assign(partials))),
                *self.warp_reduce(FULL_MASK, warps, 32, lane, None),
                *self.broadcast(FULL_MASK, 32),
            ]
        else:
            k = Var("red_w")
            items += self.assign(tuple(BufferLoad(b, zero) for b in bufs))
            others = [Var("red_other", b.dtype) for b in bufs]
            combine = _block(
                [
                    *((o, BufferLoad(b, (k,))) for o, b in zip(others, bufs)),
                    *self.combine_with(tuple(others)),
                ]
            )
            items.append(For(k, Const(1), Const(warps - 1), combine))
        items.append(Sync())  # the partials are read before a later reduction rewrites them
        return items

    def shared_tree(self) -> list[Item]:
        stride = {"x": 1, "y": self.block[0], "z": self.block[0] * self.block[1]}[self.axis]
        r = thread_index(self.axis)
        me = Var("red_tid")
        bufs = self.scratch_buffers(self.total)
        store_mine = [BufferStore(b, (me,), v) for b, v in zip(bufs, self.current())]
        items: list[Item] = [(me, self.linear_tid()), *store_mine, Sync()]
        step = _next_pow2(self.width) // 2
        while step >= 1:
            others = [Var("red_other", b.dtype) for b in bufs]
            partner = Add(me, Const(step * stride))
            update = [
                *((o, BufferLoad(b, (partner,))) for o, b in zip(others, bufs)),
                *self.combine_with(tuple(others)),
                *[BufferStore(b, (me,), v) for b, v in zip(bufs, self.current())],
            ]
            inside = And(LT(r, Const(step)), LT(Add(r, Const(step)), Const(self.width)))
            items += [IfThenElse(inside, _block(update)), Sync()]
            step //= 2
        first = Sub(me, Mul(r, Const(stride)))
        items += self.assign(tuple(BufferLoad(b, (first,)) for b in bufs))
        items.append(Sync())  # the tree is read before a later reduction rewrites it
        return items

    # -- pieces ---------------------------------------------------------------------------------
    def warp_reduce(
        self, mask: Expr, count: int, lanes: int, lane: Expr, valid: Expr | None
    ) -> list[Item]:
        """Combine `count` values spread over `lanes`-wide segments into each segment's lane 0.

        Every lane shuffles (the shuffle is outside any condition); only lanes whose partner
        holds a value combine."""
        items: list[Item] = []
        offset = _next_pow2(count) // 2
        while offset >= 1:
            others = [Var("red_other", v.dtype) for v in self.s.values]
            shuffles = [
                (o, warp_shuffle_down(mask, x, offset, lanes))
                for o, x in zip(others, self.current())
            ]
            update = self.combine_with(tuple(others))
            if valid is not None:
                update = [IfThenElse(LT(Add(lane, Const(offset)), valid), _block(update))]
            items += [*shuffles, *update]
            offset //= 2
        return items

    def broadcast(self, mask: Expr, lanes: int) -> list[Item]:
        """Every lane takes its segment's lane 0 values."""
        return self.assign(tuple(warp_shuffle(mask, x, 0, lanes) for x in self.current()))

    def scratch_buffers(self, count: int) -> list[Buffer]:
        bufs = [
            Buffer(f"red_buf{i}", (Const(count),), v.dtype, "shared")
            for i, v in enumerate(self.s.values)
        ]
        self.scratch += bufs
        return bufs

    def linear_tid(self) -> Expr:
        bx, by, bz = self.block
        tid: Expr = thread_index("x")
        if by > 1:
            tid = Add(tid, Mul(Const(bx), thread_index("y")))
        if bz > 1:
            tid = Add(tid, Mul(Const(bx * by), thread_index("z")))
        return tid

    def warp_mask(self) -> Expr:
        """The lanes that exist in this thread's warp (the last warp of a block may be partial)."""
        if self.total % 32 == 0:
            return FULL_MASK
        partial = Const((1 << (self.total % 32)) - 1, "uint32")
        if self.total < 32:
            return partial
        last = EQ(FloorDiv(self.linear_tid(), Const(32)), Const(self.total // 32))
        return Select(last, partial, FULL_MASK)


def _block(items: list[Item]) -> Stmt:
    """The statements of `items` in order, each let scoping everything after it."""
    out: list[Stmt] = []
    for item in reversed(items):
        if isinstance(item, tuple):
            var, value = item
            out = [LetStmt(var, value, seq(*out))]
        else:
            out.insert(0, item)
    return seq(*out)


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _is_pow2(n: int) -> bool:
    return n & (n - 1) == 0
