"""Drop lane masks that unrolling made constant: all lanes on -> no mask; all off -> no store.

`C[ramp(8, 1, 8)] = v if ramp(56, 1, 8) < broadcast(56, 8)` stores nothing and disappears;
`if ramp(48, 1, 8) < broadcast(56, 8)` holds in every lane and the mask goes. (Tails of tiles
often look like this once their inner loops are unrolled.)
"""

from __future__ import annotations

from typing import Any

from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Broadcast, BufferLoad
from tensorforge.ir.passes.vectorize_loops import _constant_lanes
from tensorforge.ir.stmt import BufferStore, Seq, Stmt
from tensorforge.ir.visit import rewrite


def fold_lane_masks(stmt: Stmt) -> Stmt:
    return rewrite(stmt, _fold)


def constant_lanes(predicate: Any) -> list[bool] | None:
    """Each lane's truth of a vector mask known lane by lane (`ramp(48, 1, 16) < 56`), else None."""
    hit = _LANES.get(id(predicate))
    if hit is not None and hit[0] is predicate:
        return None if hit[1] is None else list(hit[1])
    lanes = _constant_lanes(simplify_expr(predicate))
    if len(_LANES) >= _MAX_LANES:
        _LANES.clear()
    _LANES[id(predicate)] = (predicate, None if lanes is None else tuple(lanes))
    return lanes


# NOTE: the same mask is asked about here, by unmask_private_stores and by the llvm code
# generator (simplifying it each time: 6% of a CPU kernel's lowering); the entry holds the node,
# so its id is not reused while it is there
_LANES: dict[int, tuple[Any, tuple[bool, ...] | None]] = {}
_MAX_LANES = 8192


def _fold(node: Any) -> Any:
    match node:
        case BufferStore(predicate=p) if p is not None:
            lanes = constant_lanes(p)
            if lanes is not None and not any(lanes):
                return Seq(())  # no lane is stored
            if lanes is not None and all(lanes):
                return BufferStore(node.buffer, node.indices, node.value, None)
        case BufferLoad(indices=(Broadcast(value=index, lanes=n),), predicate=None):
            return Broadcast(BufferLoad(node.buffer, (index,)), n)  # one scalar load, not a gather
        case BufferLoad(predicate=p) if p is not None:
            lanes = constant_lanes(p)
            if lanes is not None and all(lanes):
                unmasked = BufferLoad(node.buffer, node.indices, None)
                folded = _fold(unmasked)
                return unmasked if folded is None else folded
    return None
