"""n-d buffer accesses -> 1-d element offsets; `Realize` regions -> `Allocate`."""

from __future__ import annotations

from typing import Any

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.arith.index_dtype import offset_dtype, widen
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import Allocate, BufferStore, Prefetch, Realize, Stmt
from tensorforge.ir.visit import map_children
from tensorforge.te.expr import Expr, const


def dense_strides(shape: tuple[Expr, ...], dtype: str = "int32") -> tuple[Expr, ...]:
    """Row-major strides of `shape`, computed in the offset `dtype` (int64 for big buffers)."""
    strides: list[Expr] = []
    running: Expr = const(1, dtype)
    for extent in reversed(shape):
        strides.append(running)
        running = simplify_expr(running * widen(extent, dtype))
    return tuple(reversed(strides))


def buffer_strides(buffer: Buffer) -> tuple[tuple[Expr, ...], str]:
    """The buffer's strides and the dtype its offsets are computed in (ir/arith/index_dtype)."""
    dtype = offset_dtype(buffer.shape, buffer.strides)
    if buffer.strides:
        return tuple(widen(s, dtype) for s in buffer.strides), dtype
    return dense_strides(buffer.shape, dtype), dtype


def flat_index(buffer: Buffer, indices: tuple[Expr, ...], mins: tuple[Expr, ...] | None) -> Expr:
    strides, dtype = buffer_strides(buffer)
    offset: Expr = const(0, dtype)
    for d, (index, stride) in enumerate(zip(indices, strides)):
        shifted = index if mins is None else index - mins[d]
        offset = offset + widen(shifted, dtype) * stride
    return simplify_expr(offset)


def _flat_already(buffer: Buffer, index: Expr, mins: tuple[Expr, ...] | None) -> Expr:
    """A flat index into an n-d buffer, relative to its realized region's first element."""
    return index if mins is None else simplify_expr(index - flat_index(buffer, mins, None))


def flatten_storage(stmt: Stmt) -> Stmt:
    """`A[i, j]` -> `A[i*stride + j]` (relative to the realized region's min); Realize -> Allocate."""
    return _flatten(stmt, {})


def _flatten(node: Any, regions: dict[int, tuple[Expr, ...]]) -> Any:
    match node:
        case Realize(buffer=buf, mins=mins, extents=_, body=body):
            inner = _flatten(body, {**regions, id(buf): mins})
            strides, dtype = buffer_strides(buf)
            size = simplify_expr(strides[0] * widen(buf.shape[0], dtype)) if buf.shape else const(1)
            return Allocate(buf, size, inner)
        case BufferLoad(buffer=buf, indices=(index,), predicate=pred) if len(buf.shape) >= 2:
            # NOTE: one index into an n-d buffer is flat already (an ir_builder's A[i])
            index = _flat_already(buf, _flatten(index, regions), regions.get(id(buf)))
            return BufferLoad(buf, (index,), pred)
        case BufferStore(buffer=buf, indices=(index,), value=value, predicate=pred) if (
            len(buf.shape) >= 2
        ):
            index = _flat_already(buf, _flatten(index, regions), regions.get(id(buf)))
            return BufferStore(buf, (index,), _flatten(value, regions), pred)
        case BufferLoad(buffer=buf, indices=idx, predicate=pred) if (
            len(idx) != 1 or id(buf) in regions
        ):
            idx = tuple(_flatten(i, regions) for i in idx)
            return BufferLoad(buf, (flat_index(buf, idx, regions.get(id(buf))),), pred)
        case BufferStore(buffer=buf, indices=idx, value=value, predicate=pred):
            idx = tuple(_flatten(i, regions) for i in idx)
            value = _flatten(value, regions)
            return BufferStore(buf, (flat_index(buf, idx, regions.get(id(buf))),), value, pred)
        case Prefetch(buffer=buf, indices=idx, write=write):
            idx = tuple(_flatten(i, regions) for i in idx)
            return Prefetch(buf, (flat_index(buf, idx, regions.get(id(buf))),), write)
    return map_children(node, lambda child: _flatten(child, regions))
