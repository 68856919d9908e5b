"""IR arguments of calls out of generated code (te.extern, tensorize): buffer addresses; and
the buffers an ir_builder's statements read and write in place of a te.extern's ExternBuffers."""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.te.expr import Expr, node
from tensorforge.te.extern_call import HANDLE, ExternBuffer
from tensorforge.te.printer import expr_to_str


@node
class AddressOf(Expr):
    """The address of the element `load` reads (a pointer argument of an extern call).

    It wraps a load so storage flattening turns its n-d index into the flat offset. `access`
    ("r", "w" or "rw") is what the callee does there (an access_ptr's): a pipeline pass tells a
    tensorized fill of a shared tile ("w") from a compute that reads it."""

    load: BufferLoad
    access: str = "rw"

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return HANDLE

    def print_parts(self) -> str:
        return f"&{expr_to_str(self.load)}"


@node
class WholeBuffer(Expr):
    """All of `buffer` (its address and shape): a packed function's NDArray argument."""

    buffer: Buffer

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return HANDLE

    def print_parts(self) -> str:
        return f"{self.buffer.name}"


@dataclass(frozen=True, eq=False)
class ExternBufferView(Buffer):
    """`extern` (an input or output of a te.extern stage) as an ir_builder's statements access
    it, always with one flat, row-major index; lowering the stage puts the buffer that holds
    the tensor in its place (schedule/opaque_ops.py)."""

    extern: ExternBuffer | None = None
