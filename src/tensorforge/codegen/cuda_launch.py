"""Launch geometry from THREAD_BINDING loops: extents per thread tag, device limits, guards.

Every `For(kind=THREAD_BINDING)` names a tag (blockIdx.x ... threadIdx.z). Loops that share a tag
(sibling stages under one block) share the launch dimension: the launch takes the largest
constant extent (the pass guard_thread_extents has given every such loop that extent and
guarded its body). This module only reads the IR.
A symbolic extent must be computable on the host from the kernel's scalar parameters; it is
stored as a parameter name or a Python expression over them (`Launch.grid`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge.codegen.base import Launch
from tensorforge.errors import BuildError
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Seq,
    Stmt,
    While,
)
from tensorforge.ir.visit import walk
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E

TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z")
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = {"x": 1024, "y": 1024, "z": 64}
MAX_GRID = {"x": 2**31 - 1, "y": 65535, "z": 65535}


@dataclass
class ThreadExtents:
    """What the kernel is launched with: per tag an int, or an Expr over scalar params."""

    extents: dict[str, int | E.Expr]
    launch: Launch

    def block_dim(self, axis: str) -> int:
        return self.launch.block["xyz".index(axis)]


def thread_loops(body: Stmt) -> dict[str, list[For]]:
    """The THREAD_BINDING loops of `body` by tag; a tag bound inside a loop of itself is an error."""
    found: dict[str, list[For]] = {}

    def visit(s: Stmt, active: dict[str, For]) -> None:
        if isinstance(s, For) and s.kind is LoopKind.THREAD_BINDING:
            if s.thread_tag not in TAGS:
                raise BuildError(
                    f"thread axis '{s.var.name}' is bound to unknown tag {s.thread_tag!r}; "
                    f"expected one of {', '.join(TAGS)}"
                )
            outer = active.get(s.thread_tag)
            if outer is not None:
                raise BuildError(
                    f"thread tag {s.thread_tag} is bound twice in nested loops "
                    f"'{outer.var.name}' and '{s.var.name}'"
                )
            found.setdefault(s.thread_tag, []).append(s)
            active = active | {s.thread_tag: s}
        for child in _stmt_children(s):
            visit(child, active)

    visit(body, {})
    return found


def _stmt_children(s: Stmt) -> list[Stmt]:
    match s:
        case Seq(stmts=stmts):
            return list(stmts)
        case IfThenElse(then_case=t, else_case=e):
            return [t] if e is None else [t, e]
        case For(body=b) | Allocate(body=b) | LetStmt(body=b) | Attr(body=b) | While(body=b):
            return [b]
    return []


def compute_launch(body: Stmt, scalar_params: dict[int, E.Var]) -> ThreadExtents:
    """Grid and block sizes from the thread-bound loops, checked against the device limits."""
    loops = thread_loops(body)
    extents: dict[str, int | E.Expr] = {}
    for tag, group in loops.items():
        extents[tag] = _tag_extent(tag, group, scalar_params)
    lanes = {int(v) for n in walk(body) if isinstance(n, For) for k, v in n.pragmas if k == "block_lanes"}  # fmt: skip
    if lanes:  # whole warps run statements no thread loop splits (tensor intrinsics' calls)
        if len(lanes) > 1 or extents.get("threadIdx.x", min(lanes)) not in lanes:
            raise BuildError(
                f"pragma block_lanes {sorted(lanes)} disagrees with the threadIdx.x extent "
                f"{extents.get('threadIdx.x')}"
            )
        extents["threadIdx.x"] = lanes.pop()
    for tag, ext in extents.items():
        axis = tag[-1]
        if isinstance(ext, int) and ext < 1:
            raise BuildError(f"thread axis '{loops[tag][0].var.name}' ({tag}) has extent {ext} < 1")
        if tag.startswith("threadIdx"):
            if not isinstance(ext, int):
                raise BuildError(
                    f"thread axis '{loops[tag][0].var.name}' is bound to {tag} with a symbolic "
                    f"extent {ext}: the block size must be a constant (split it by a constant first)"
                )
            if ext > MAX_BLOCK[axis]:
                raise BuildError(
                    f"thread axis '{_axis_names(loops[tag])}' bound to {tag} has extent {ext}, "
                    f"more than the {MAX_BLOCK[axis]} threads a block may have along {axis}"
                )
        elif isinstance(ext, int) and ext > MAX_GRID[axis]:
            raise BuildError(
                f"thread axis '{_axis_names(loops[tag])}' bound to {tag} has extent {ext}, "
                f"more than the {MAX_GRID[axis]} blocks a grid may have along {axis}"
            )
    for tag, group in loops.items():
        short = [
            x for x in group if isinstance(x.extent, E.Const) and x.extent.value != extents[tag]
        ]
        if short:
            raise BuildError(
                f"thread axis '{short[0].var.name}' bound to {tag} has extent {short[0].extent} "
                f"where the launch has {extents[tag]}: run the pass guard_thread_extents first "
                f"(tf.lower does)"
            )
    block = tuple(int(extents.get(f"threadIdx.{a}", 1)) for a in "xyz")
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK:
        parts = ", ".join(
            f"{t} ('{_axis_names(loops[t])}') = {extents[t]}" for t in TAGS[3:] if t in extents
        )
        raise BuildError(
            f"a block of {block[0]}x{block[1]}x{block[2]} = {threads} threads exceeds the "
            f"{MAX_THREADS_PER_BLOCK} threads per block of CUDA devices ({parts})"
        )
    grid = tuple(_launch_entry(extents.get(f"blockIdx.{a}", 1)) for a in "xyz")
    return ThreadExtents(extents, Launch(grid=grid, block=block, shared_bytes=0))  # type: ignore[arg-type]


def _axis_names(group: list[For]) -> str:
    return "/".join(dict.fromkeys(loop.var.name for loop in group))


def _tag_extent(tag: str, group: list[For], scalar_params: dict[int, E.Var]) -> int | E.Expr:
    constants, symbolic = [], []
    for loop in group:
        if isinstance(loop.extent, E.Const):
            constants.append(int(loop.extent.value))
            continue
        bad = [v for v in walk(loop.extent) if isinstance(v, E.Var) and id(v) not in scalar_params]
        loads = [x for x in walk(loop.extent) if isinstance(x, BufferLoad)]
        if bad or loads:
            what = (
                f"'{bad[0].name}', which is not a scalar kernel parameter"
                if bad
                else "a memory load"
            )
            raise BuildError(
                f"thread axis '{loop.var.name}' bound to {tag} has extent {loop.extent}, which "
                f"depends on {what}: the launch size must be computable before the kernel runs"
            )
        try:
            host_expr(loop.extent)
        except BuildError as err:
            raise BuildError(f"thread axis '{loop.var.name}' bound to {tag}: {err}") from None
        symbolic.append(loop)
    if symbolic:
        first = symbolic[0]
        for loop in symbolic[1:] + ([] if not constants else [None]):  # type: ignore[list-item]
            if loop is None or not E.structural_equal(loop.extent, first.extent):
                other = "a constant" if loop is None else f"'{loop.var.name}' ({loop.extent})"
                raise BuildError(
                    f"thread tag {tag} is bound by loops of different extents: "
                    f"'{first.var.name}' ({first.extent}) and {other}; bind the same extent"
                )
        return first.extent
    return max(constants)


def _launch_entry(ext: int | E.Expr) -> int | str:
    if isinstance(ext, int):
        return ext
    return ext.name if isinstance(ext, E.Var) else host_expr(ext)


def host_expr(e: E.Expr) -> str:
    """`e` as a Python expression over scalar parameter names (evaluated by the runtime)."""
    match e:
        case E.Var(name=name):
            return name
        case E.Const(value=v) if dt.is_int(e.dtype):
            return str(int(v))
        case E.Add(a=a, b=b):
            return f"({host_expr(a)} + {host_expr(b)})"
        case E.Sub(a=a, b=b):
            return f"({host_expr(a)} - {host_expr(b)})"
        case E.Mul(a=a, b=b):
            return f"({host_expr(a)} * {host_expr(b)})"
        case E.FloorDiv(a=a, b=b):
            return f"({host_expr(a)} // {host_expr(b)})"
        case E.FloorMod(a=a, b=b):
            return f"({host_expr(a)} % {host_expr(b)})"
        case E.Min(a=a, b=b):
            return f"min({host_expr(a)}, {host_expr(b)})"
        case E.Max(a=a, b=b):
            return f"max({host_expr(a)}, {host_expr(b)})"
        case E.Cast(value=v) if dt.is_int(e.dtype) and dt.is_int(v.dtype):
            return host_expr(v)
    raise BuildError(f"extent {e} cannot be computed on the host (only + - * // % min max of ints)")
