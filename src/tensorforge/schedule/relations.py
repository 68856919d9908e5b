"""Schedule decisions recorded as data: how a stage's loops derive from its root axes.

Each relation derives some iter vars (`derived`) from others (`sources`) and carries its own
meaning, so the code that walks a stage's relations (iter_math, loops, rfactor) needs no case
per relation type, and a new relation cannot be missed by one of them:

- `derived_extents`: forward, the derived vars' extents from the sources';
- `source_values`: backward, the sources' values from the derived vars' values;
- `guards`: the conditions that keep those values inside the sources' extents (a non-divisible
  split runs past its parent);
- `tail`: a guard-free main loop and a tail loop, where the relation allows one;
- `depends_on_extent_of`: whether the backward mapping changes with some vars' extents.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.arith.index_dtype import narrow, widen
from tensorforge.ir.stmt import LoopKind
from tensorforge.te.expr import LT, Const, Expr
from tensorforge.te.tensor import IterVar

TAIL_MODES = ("auto", "guard", "peel")


def ceil_div(a: Expr, b: Expr) -> Expr:
    return simplify_expr((a + b - 1) // b)


@dataclass(frozen=True)
class Tail:
    """A loop split into `full` guard-free iterations and one tail iteration where `inner`
    runs `remainder` times."""

    inner: IterVar
    full: Expr
    remainder: Expr


@dataclass(frozen=True)
class Split:
    """`parent` = `outer` * factor + `inner`; non-divisible tails handled as `tail` says."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: Expr | None
    nparts: Expr | None
    tail: str = "auto"  # "auto" | "guard" | "peel"

    @property
    def sources(self) -> tuple[IterVar, ...]:
        return (self.parent,)

    @property
    def derived(self) -> tuple[IterVar, ...]:
        return (self.outer, self.inner)

    def derived_extents(self, extents: Mapping[IterVar, Expr]) -> dict[IterVar, Expr]:
        parent = extents[self.parent]
        if self.factor is not None:
            outer, inner = ceil_div(parent, self.factor), self.factor
        else:
            outer, inner = self.nparts, ceil_div(parent, self.nparts)
        return {self.outer: outer, self.inner: simplify_expr(inner)}

    def stride(self, extents: Mapping[IterVar, Expr]) -> Expr:
        """The stride of `outer` in `parent`.

        A factor split's stride is its factor, even in a peeled tail whose inner loop runs over
        the remainder only; an nparts split's stride is ceil(parent / nparts) of the parent's
        extent *here* (a tail's parent is shorter than the main loop's).
        """
        return self.factor if self.factor is not None else extents[self.inner]

    def source_values(
        self, values: Mapping[IterVar, Expr], extents: Mapping[IterVar, Expr]
    ) -> dict[IterVar, Expr]:
        return {self.parent: values[self.outer] * self.stride(extents) + values[self.inner]}

    def guards(
        self, values: Mapping[IterVar, Expr], extents: Mapping[IterVar, Expr]
    ) -> tuple[Expr, ...]:
        # the last outer iteration of a non-divisible split runs past the parent's extent
        value = values[self.parent]
        return (LT(value, widen(extents[self.parent], value.dtype)),)

    def tail_of(self, loop: IterVar, extents: Mapping[IterVar, Expr]) -> Tail | None:
        """The peeled tail when `loop` is this split's outer loop and its tail mode asks for one
        (a constant remainder for "auto", any remainder for "peel")."""
        if loop is not self.outer or self.tail == "guard" or self.factor is None:
            return None
        parent = extents[self.parent]
        remainder = simplify_expr(parent % self.factor)
        if isinstance(remainder, Const) and remainder.value == 0:
            return None
        if self.tail == "auto" and not isinstance(remainder, Const):
            return None  # symbolic extent: guard
        return Tail(self.inner, simplify_expr(parent // self.factor), remainder)

    def depends_on_extent_of(self, ivs: set[IterVar]) -> bool:
        # an nparts split strides by ceil(parent / nparts)
        return self.nparts is not None and self.parent in ivs


@dataclass(frozen=True)
class Fuse:
    """`fused` = `outer` * extent(inner) + `inner`."""

    outer: IterVar
    inner: IterVar
    fused: IterVar

    @property
    def sources(self) -> tuple[IterVar, ...]:
        return (self.outer, self.inner)

    @property
    def derived(self) -> tuple[IterVar, ...]:
        return (self.fused,)

    def derived_extents(self, extents: Mapping[IterVar, Expr]) -> dict[IterVar, Expr]:
        dtype = self.fused.var.dtype  # int64 where the product can pass int32 (Stage.fuse)
        outer, inner = widen(extents[self.outer], dtype), widen(extents[self.inner], dtype)
        return {self.fused: simplify_expr(outer * inner)}

    def source_values(
        self, values: Mapping[IterVar, Expr], extents: Mapping[IterVar, Expr]
    ) -> dict[IterVar, Expr]:
        fused = values[self.fused]
        inner_extent = widen(extents[self.inner], fused.dtype)
        # each part lies inside its own extent, so it narrows back to its own dtype exactly
        return {
            self.outer: narrow(fused // inner_extent, self.outer.var.dtype),
            self.inner: narrow(fused % inner_extent, self.inner.var.dtype),
        }

    def guards(
        self, values: Mapping[IterVar, Expr], extents: Mapping[IterVar, Expr]
    ) -> tuple[Expr, ...]:
        return ()  # the fused extent is the exact product: every value decomposes inside

    def tail_of(self, loop: IterVar, extents: Mapping[IterVar, Expr]) -> Tail | None:
        return None

    def depends_on_extent_of(self, ivs: set[IterVar]) -> bool:
        return self.inner in ivs  # the fused value divides by the inner extent


Relation = Split | Fuse


@dataclass
class IterAttr:
    """How one loop runs: its kind, the thread it is bound to, its pragmas."""

    kind: LoopKind = LoopKind.SERIAL
    thread: IterVar | None = None
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
