"""n-d buffer accesses -> 1-d element offsets; `Realize` regions -> `Allocate`."""

from __future__ import annotations

from typing import Any

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import Allocate, BufferStore, Prefetch, Realize, Stmt
from tensorforge.ir.visit import map_children
from tensorforge.te.expr import Expr, const


def dense_strides(shape: tuple[Expr, ...]) -> tuple[Expr, ...]:
    strides: list[Expr] = []
    running: Expr = const(1)
    for extent in reversed(shape):
        strides.append(running)
        running = simplify_expr(running * extent)
    return tuple(reversed(strides))


def flat_index(buffer: Buffer, indices: tuple[Expr, ...], mins: tuple[Expr, ...] | None) -> Expr:
    strides = buffer.strides or dense_strides(buffer.shape)
    offset: Expr = const(0)
    for d, (index, stride) in enumerate(zip(indices, strides)):
        shifted = index if mins is None else index - mins[d]
        offset = offset + shifted * stride
    return simplify_expr(offset)


def flatten_storage(stmt: Stmt) -> Stmt:
    """`A[i, j]` -> `A[i*stride + j]` (relative to the realized region's min); Realize -> Allocate."""
    return _flatten(stmt, {})


def _flatten(node: Any, regions: dict[int, tuple[Expr, ...]]) -> Any:
    match node:
        case Realize(buffer=buf, mins=mins, extents=_, body=body):
            inner = _flatten(body, {**regions, id(buf): mins})
            strides = buf.strides or dense_strides(buf.shape)
            size = simplify_expr(strides[0] * buf.shape[0]) if buf.shape else const(1)
            return Allocate(buf, size, inner)
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
