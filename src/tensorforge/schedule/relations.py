"""Schedule decisions recorded as data: how a stage's loops derive from its root axes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorforge.ir.stmt import LoopKind
from tensorforge.te.expr import Expr
from tensorforge.te.tensor import IterVar

TAIL_MODES = ("auto", "guard", "peel")


@dataclass(frozen=True)
class Split:
    """`parent` = `outer` * factor + `inner`; non-divisible tails handled as `tail` says."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None
    tail: str = "auto"  # "auto" | "guard" | "peel"


@dataclass(frozen=True)
class Fuse:
    """`fused` = `outer` * extent(inner) + `inner`."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


Relation = Split | Fuse


@dataclass
class IterAttr:
    """How one loop runs: its kind, the thread it is bound to, its pragmas."""

    kind: LoopKind = LoopKind.SERIAL
    thread: IterVar | None = None
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
