"""Vector indices as a scalar base plus constant lane offsets.

`broadcast(i*64, 64) + max(ramp(-1, 1, 64), broadcast(0, 64))` is `i*64` plus the offsets
(0, 0, 1, ..., 62): a pad's clamped edge. `ramp(0, 1, 16) % 2 * 4096 + ramp(0, 1, 16) // 2`
(two rows interleaved) and `int(float(ramp(0, 1, 64)) * 0.5)` (a nearest upsample) are
constants too. Knowing the offsets, bounds of the base bound every lane, and a backend can read
the lanes as a few contiguous windows instead of one element at a time.
"""

from __future__ import annotations

from tensorforge.ir.arith.const_fold import fold_binary, fold_cast
from tensorforge.ir.expr import Broadcast, Ramp
from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    GE,
    GT,
    LE,
    LT,
    Add,
    BinaryOp,
    Cast,
    Const,
    Expr,
    Max,
    Min,
    Mul,
    Not,
    Select,
    Sub,
)


def lane_offsets(index: Expr) -> tuple[Expr, tuple[int, ...]] | None:
    """(base, offsets): lane k of the integer vector `index` is `base + offsets[k]`, with `base`
    a scalar expression and the offsets integers; None where the lanes are not so related."""
    match index:
        case Broadcast(value=value, lanes=n):
            return value, (0,) * n
        case Ramp(base=base, stride=Const(value=stride), lanes=n):
            return base, tuple(k * stride for k in range(n))
        case Add(a, b) | Sub(a, b):
            left, right = lane_offsets(a), lane_offsets(b)
            if left is None or right is None:
                return None
            sign = 1 if isinstance(index, Add) else -1
            offsets = tuple(x + sign * y for x, y in zip(left[1], right[1]))
            return type(index)(left[0], right[0]), offsets
        case Mul(x, Broadcast(value=Const(value=c))) | Mul(Broadcast(value=Const(value=c)), x):
            inner = lane_offsets(x)
            if inner is None:
                return None
            return Mul(inner[0], Const(c, inner[0].dtype)), tuple(k * c for k in inner[1])
    values = lane_values(index)
    if values is None or not dt.is_int(dt.element_of(index.dtype)):
        return None
    return Const(0, dt.element_of(index.dtype)), tuple(int(v.value) for v in values)


def lane_values(e: Expr) -> list[Const] | None:
    """Each lane of a vector expression made only of constants, computed as the kernel would
    (const_fold's rules), or None (a variable, a load, a result the kernel leaves undefined)."""
    match e:
        case Broadcast(value=Const() as value, lanes=n):
            return [value] * n
        case Ramp(base=Const(value=base), stride=Const(value=stride), lanes=n):
            return [Const(base + k * stride, e.base.dtype) for k in range(n)]
        case BinaryOp(a, b):
            left, right = lane_values(a), lane_values(b)
            if left is None or right is None:
                return None
            return _all_folded([fold_binary(type(e)(x, y)) for x, y in zip(left, right)])
        case Not(a):
            inner = lane_values(a)
            return None if inner is None else [Const(not v.value, "bool") for v in inner]
        case Select(condition, true_value, false_value):
            parts = [lane_values(x) for x in (condition, true_value, false_value)]
            if any(p is None for p in parts):
                return None
            return [t if c.value else f for c, t, f in zip(*parts)]
        case Cast(dtype=dtype, value=value):
            inner = lane_values(value)
            if inner is None:
                return None
            return _all_folded([fold_cast(dt.element_of(dtype), v) for v in inner])
    return None


def _all_folded(values: list[Const | None]) -> list[Const] | None:
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def lane_bound(node: Expr) -> Expr | None:
    """For a ramp (stride >= 0) clamped by or compared with a broadcast, the scalar condition
    under which the clamp changes no lane or the comparison holds in every lane: its first lane
    decides a lower bound, its last an upper one (`max(ramp(b, 2, 8), broadcast(c))`: b >= c;
    `ramp(b, 1, 16) < broadcast(n)`: b + 15 < n). None for any other node. The simplifier drops
    what holds; peel_vector_bounds peels the iterations where it does not."""
    match node:
        case Max(Ramp(base, Const(value=st)), Broadcast(c)) | GE(
            Ramp(base, Const(value=st)), Broadcast(c)
        ) if st >= 0:
            return GE(base, c)
        case GT(Ramp(base, Const(value=st)), Broadcast(c)) if st >= 0:
            return GT(base, c)
        case Min(Ramp(base, Const(value=st), n), Broadcast(c)) | LE(
            Ramp(base, Const(value=st), n), Broadcast(c)
        ) if st >= 0:
            return LE(_last_lane(base, st, n), c)
        case LT(Ramp(base, Const(value=st), n), Broadcast(c)) if st >= 0:
            return LT(_last_lane(base, st, n), c)
    return None


def _last_lane(base: Expr, stride: int, lanes: int) -> Expr:
    return Add(base, Const(stride * (lanes - 1), base.dtype))
