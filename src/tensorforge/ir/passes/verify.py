"""Check the lowered IR's invariants before it reaches a backend (docs/lowered-ir.md)."""

from __future__ import annotations

from tensorforge.errors import LoweringError
from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.stmt import BufferStore, Realize, Stmt
from tensorforge.ir.visit import walk
from tensorforge.te.expr import Reduce, TensorRead


def verify(stmt: Stmt) -> Stmt:
    """Raise LoweringError if something a backend cannot handle is left in the IR."""
    for node in walk(stmt):
        if isinstance(node, (TensorRead, Reduce, Realize)):
            raise LoweringError(f"verify: a {type(node).__name__} survived lowering: {node}")
        if isinstance(node, (BufferLoad, BufferStore)) and len(node.indices) != 1:
            raise LoweringError(f"verify: access to '{node.buffer.name}' was not flattened")
    return stmt
