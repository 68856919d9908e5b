"""Loop IR statements and PrimFunc: frozen dataclasses, compared structurally."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from tensorforge.ir.expr import Buffer
from tensorforge.te.expr import CommReducer, Expr, Var


class LoopKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


class Stmt:
    """Base of all statements."""

    _is_stmt = True

    def __str__(self) -> str:
        from tensorforge.ir.printer import stmt_to_str

        return stmt_to_str(self)


stmt = dataclass(frozen=True)


@stmt
class For(Stmt):
    """`for var in range(min, min + extent): body`, run as `kind` says.

    `thread_tag` names the GPU index a THREAD_BINDING loop is bound to; `pragmas` carries
    (name, value) annotations such as ("unroll_explicit", 1).
    """

    var: Var
    min: Expr
    extent: Expr
    body: Stmt
    kind: LoopKind = LoopKind.SERIAL
    thread_tag: str = ""
    pragmas: tuple[tuple[str, Any], ...] = ()


@stmt
class BufferStore(Stmt):
    """`buffer[indices] = value` (only lanes where `predicate` holds, if given)."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    predicate: Expr | None = None


@stmt
class Realize(Stmt):
    """The region [mins, mins + extents) of `buffer` exists inside `body` (before flattening)."""

    buffer: Buffer
    mins: tuple[Expr, ...]
    extents: tuple[Expr, ...]
    body: Stmt


@stmt
class Allocate(Stmt):
    """Storage for `buffer` (of its flat `extent` elements) exists inside `body`; freed after it."""

    buffer: Buffer
    extent: Expr
    body: Stmt


@stmt
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@stmt
class While(Stmt):
    """`while condition: body` (tir.ir_builder's while_loop): the condition is read again
    before every step, so the body's stores decide when it stops."""

    condition: Expr
    body: Stmt


@stmt
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@stmt
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@stmt
class Evaluate(Stmt):
    value: Expr


@stmt
class Prefetch(Stmt):
    """Ask the CPU to bring the cache line holding `buffer[indices]` closer (a hint); `write`
    asks for it in a writable state (prefetchw), for stores that follow.

    A prefetch never faults, so the index may lie outside the buffer (the next row of a
    matrix, past its end): the verifier checks its variables, not its bounds.
    """

    buffer: Buffer
    indices: tuple[Expr, ...]
    write: bool = False


@stmt
class Sync(Stmt):
    """A barrier among the threads of a GPU block (`__syncthreads()`)."""

    scope: str = "shared"


@stmt
class ThreadAllReduce(Stmt):
    """Combine `values` across the `extent` GPU threads along `thread_tag` with `combiner`.

    Afterwards every participating thread sees the combined tuple in `results` (one-element
    "local" buffers, one per value). Emitted for a reduction axis bound to a thread index.
    Threads where `condition` is false (set by guard_thread_extents) take part in the barrier
    but contribute the identity.
    """

    combiner: CommReducer
    values: tuple[Expr, ...]
    results: tuple[Buffer, ...]
    thread_tag: str
    extent: int
    condition: Expr | None = None


@stmt
class KernelLaunch(Stmt):
    """One GPU kernel of a function that launches several: `body` runs on the device as kernel
    `name`; the host launches a function's kernels in order (made by split_device_kernels)."""

    name: str
    body: Stmt


@stmt
class Attr(Stmt):
    """An annotation `key = value` on `body` (e.g. a pragma or a double-buffer marker)."""

    key: str
    value: Any
    body: Stmt


@dataclass(frozen=True)
class PrimFunc:
    """A lowered function: its parameters (buffers and scalar vars) and its body."""

    name: str
    params: tuple[Buffer | Var, ...]
    body: Stmt
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def __str__(self) -> str:
        from tensorforge.ir.printer import func_to_str

        return func_to_str(self)


def seq(*stmts: Stmt) -> Stmt:
    """A Seq of the non-empty statements, flattened; a single statement stands alone."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
