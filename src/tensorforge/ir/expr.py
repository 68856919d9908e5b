"""IR-level expressions: buffer loads and the vector nodes the vectorizer introduces."""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge.te import dtype as dt
from tensorforge.te.expr import Expr, Var
from tensorforge.te.printer import expr_to_str

node = dataclass(frozen=True, eq=False, repr=False)


@dataclass(frozen=True, eq=False)
class Buffer:
    """A named n-d array in memory: a kernel argument or an allocation. Compared by identity.

    `strides` (in elements) is None for a dense row-major layout. `scope` is where it lives:
    "global" (kernel arguments, heap), "local" (registers / stack), "shared" (GPU shared memory).
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    scope: str = "global"
    strides: tuple[Expr, ...] | None = None

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"Buffer({self.name})"


@node
class BufferLoad(Expr):
    """`buffer[indices]`; a Ramp index makes it a vector load; `predicate` masks lanes."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    predicate: Expr | None = None

    @property
    def dtype(self) -> str:  # type: ignore[override]
        lanes = max((dt.lanes_of(i.dtype) for i in self.indices), default=1)
        return dt.with_lanes(self.buffer.dtype, lanes)

    def print_parts(self) -> str:
        mask = "" if self.predicate is None else f" if {expr_to_str(self.predicate)}"
        return f"{self.buffer.name}[{', '.join(expr_to_str(i) for i in self.indices)}{mask}]"


@node
class Ramp(Expr):
    """The vector (base, base + stride, ..., base + (lanes-1)*stride)."""

    base: Expr
    stride: Expr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.base.dtype, self.lanes)

    def print_parts(self) -> str:
        return f"ramp({expr_to_str(self.base)}, {expr_to_str(self.stride)}, {self.lanes})"


@node
class Broadcast(Expr):
    """`value` repeated in every lane."""

    value: Expr
    lanes: int

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.with_lanes(self.value.dtype, self.lanes)

    def print_parts(self) -> str:
        return f"broadcast({expr_to_str(self.value)}, {self.lanes})"


@node
class VectorReduce(Expr):
    """Combine the lanes of a vector into a scalar: op is "add", "max" or "min"."""

    op: str
    value: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return dt.element_of(self.value.dtype)

    def print_parts(self) -> str:
        return f"reduce_{self.op}({expr_to_str(self.value)})"


__all__ = ["Buffer", "BufferLoad", "Ramp", "Broadcast", "VectorReduce", "Var"]
