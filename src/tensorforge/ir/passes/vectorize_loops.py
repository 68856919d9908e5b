"""Turn loops marked `vectorize` into straight-line vector code (Ramp indices, Broadcasts).

`for v in range(8) (vectorized): C[i*8 + v] = A[i*8 + v] * x` becomes
`C[ramp(i*8, 1, 8)] = A[ramp(i*8, 1, 8)] * broadcast(x, 8)`. Lane-dependent guards become store
and load predicates (masked lanes). Loops inside stay loops with vector bodies. A body that
cannot be vectorized (a lane-invariant store, an allocation per lane...) keeps the loop, still
marked VECTORIZED, so the backend emits a serial loop with a vectorize hint.
"""

from __future__ import annotations

from typing import Any

from tensorforge.ir.arith.linear import widens_index
from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.ir.stmt import (
    Attr,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    Prefetch,
    Seq,
    Stmt,
)
from tensorforge.ir.visit import map_children
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E
from tensorforge.te.expr import Const, Expr, Var


def _is_multiple(e: Expr, k: int) -> bool:
    """Is the integer expression `e` provably a multiple of `k` (every coefficient and constant)?"""
    from tensorforge.ir.arith import linearize

    form = linearize(e)
    return form.const % k == 0 and all(c % k == 0 for c in form.coefficients())


def _ramp_divmod(cls: type, a: Expr, b: Expr) -> Expr | None:
    """`ramp(4t, 1, 4) // 8` -> `broadcast(4t // 8, 4)`; `% 8` -> `ramp(4t % 8, 1, 4)`.

    Holds when the ramp starts on a multiple of its lane count and the divisor is a multiple of
    it too: then no two lanes straddle a multiple of the divisor.
    """
    if not (isinstance(a, Ramp) and isinstance(a.stride, Const) and a.stride.value == 1):
        return None
    if not (isinstance(b, Broadcast) and isinstance(b.value, Const)) and not isinstance(b, Const):
        return None
    divisor = (b.value if isinstance(b, Broadcast) else b).value
    if divisor <= 0 or divisor % a.lanes != 0 or not _is_multiple(a.base, a.lanes):
        return None
    c = E.const(divisor, a.base.dtype)
    if cls is E.FloorDiv:
        return Broadcast(E.FloorDiv(a.base, c), a.lanes)
    return Ramp(E.FloorMod(a.base, c), a.stride, a.lanes)


def _lane_values(e: Expr) -> list | None:
    """The per-lane values of a vector of constants (Ramp / Broadcast of Consts), else None."""
    if isinstance(e, Broadcast) and isinstance(e.value, Const):
        return [e.value.value] * e.lanes
    if isinstance(e, Ramp) and isinstance(e.base, Const) and isinstance(e.stride, Const):
        return [e.base.value + k * e.stride.value for k in range(e.lanes)]
    return None


_COMPARE = {
    E.LT: lambda a, b: a < b,
    E.LE: lambda a, b: a <= b,
    E.GT: lambda a, b: a > b,
    E.GE: lambda a, b: a >= b,
    E.EQ: lambda a, b: a == b,
    E.NE: lambda a, b: a != b,
}


def _constant_lanes(cond: Expr) -> list[bool] | None:
    """Each lane's truth for a lane-constant condition (`ramp(48, 1, 8) < broadcast(56, 8)`)."""
    if isinstance(cond, Broadcast) and isinstance(cond.value, E.Const):
        return [bool(cond.value.value)] * cond.lanes  # broadcast(True, 8): a folded one
    if type(cond) in _COMPARE:
        a, b = _lane_values(cond.a), _lane_values(cond.b)
        if a is None or b is None:
            return None
        return [_COMPARE[type(cond)](x, y) for x, y in zip(a, b)]
    if isinstance(cond, E.And):
        a, b = _constant_lanes(cond.a), _constant_lanes(cond.b)
        if a is not None and b is not None:
            return [x and y for x, y in zip(a, b)]
        if a is not None and not any(a) or b is not None and not any(b):
            return [False] * dt.lanes_of(cond.dtype)
    return None


class Unvectorizable(Exception):
    """The loop body has something the vectorizer cannot express."""


def vectorize_loops(stmt: Stmt) -> Stmt:
    """Vectorize every VECTORIZED loop of constant extent, innermost first."""
    return _visit(stmt)


def _visit(node: Any) -> Any:
    node = map_children(node, _visit)
    if (
        isinstance(node, For)
        and node.kind is LoopKind.VECTORIZED
        and isinstance(node.extent, Const)
    ):
        lanes = node.extent.value
        if lanes == 1:
            from tensorforge.ir.visit import substitute

            return substitute(node.body, {node.var: node.min})
        try:
            return _Vectorizer(node.var, node.min, lanes).stmt(node.body, None)
        except Unvectorizable:
            return node
    return node


class _Vectorizer:
    def __init__(self, var: Var, lo: Expr, lanes: int):
        self.lanes = lanes
        self.env: dict[int, Expr] = {id(var): Ramp(lo, E.const(1, var.dtype), lanes)}

    # -- expressions: scalar stays scalar unless it depends on the lane ------------------------
    def is_vec(self, e: Expr) -> bool:
        return dt.lanes_of(e.dtype) > 1

    def bcast(self, e: Expr) -> Expr:
        return e if self.is_vec(e) else Broadcast(e, self.lanes)

    def expr(self, e: Expr, pred: Expr | None) -> Expr:
        match e:
            case Var():
                return self.env.get(id(e), e)
            case Const():
                return e
            case BufferLoad(buffer=buf, indices=(index,), predicate=p):
                new_index = self.expr(index, pred)
                own = (
                    None if p is None else self.expr(p, pred)
                )  # the load's own guard (a select arm)
                if not self.is_vec(new_index) and (own is None or not self.is_vec(own)):
                    if pred is None:
                        changed = new_index is not index or own is not p
                        return BufferLoad(buf, (new_index,), own) if changed else e
                    # a lane-invariant load under a lane mask: load it only where a lane is live
                    new_index = Broadcast(new_index, self.lanes)
                elif not self.is_vec(new_index):
                    new_index = Broadcast(new_index, self.lanes)
                mask = pred
                if own is not None:
                    own = self.bcast(own)
                    mask = own if mask is None else E.And(mask, own)
                return BufferLoad(buf, (new_index,), mask)
            case E.Add(a=a, b=b) | E.Sub(a=a, b=b) | E.Mul(a=a, b=b):
                return self.arith(type(e), self.expr(a, pred), self.expr(b, pred))
            case E.FloorDiv(a=a, b=b) | E.FloorMod(a=a, b=b):
                va, vb = self.expr(a, pred), self.expr(b, pred)
                ramp_form = _ramp_divmod(type(e), va, vb)
                if ramp_form is not None:
                    return ramp_form
                if not self.is_vec(va) and not self.is_vec(vb):
                    return e if (va is a and vb is b) else type(e)(va, vb)
                return type(e)(self.bcast(va), self.bcast(vb))
            case E.BinaryOp(a=a, b=b):
                va, vb = self.expr(a, pred), self.expr(b, pred)
                if not self.is_vec(va) and not self.is_vec(vb):
                    return e if (va is a and vb is b) else type(e)(va, vb)
                return type(e)(self.bcast(va), self.bcast(vb))
            case E.Not(a=a):
                va = self.expr(a, pred)
                return e if va is a else E.Not(va)
            case E.Select(condition=c, true_value=t, false_value=f):
                parts = [self.expr(x, pred) for x in (c, t, f)]
                if not any(self.is_vec(p) for p in parts):
                    return E.Select(*parts)
                return E.Select(*[self.bcast(p) for p in parts])
            case E.Cast(dtype=d, value=v):
                vv = self.expr(v, pred)
                if isinstance(vv, Ramp) and widens_index(vv.base.dtype, d):
                    # int64(ramp(i, 1, 16)) -> ramp(int64(i), int64(1), 16): exact (index
                    # arithmetic does not overflow), and a store at a run-time row offset
                    # (`int64(j) + int64(i) * int64(n)`) keeps its contiguous address
                    return Ramp(E.Cast(d, vv.base), E.Cast(d, vv.stride), vv.lanes)
                return E.Cast(dt.with_lanes(d, dt.lanes_of(vv.dtype)), vv)
            case E.Call(dtype=d, name=name, args=args):
                vargs = [self.expr(a, pred) for a in args]
                if not any(self.is_vec(a) for a in vargs):
                    return E.Call(d, name, tuple(vargs))
                return E.Call(
                    dt.with_lanes(d, self.lanes), name, tuple(self.bcast(a) for a in vargs)
                )
            case E.Let(var=v, value=value, body=body):
                vv = self.expr(value, pred)
                if self.is_vec(vv):
                    new_var = Var(v.name, vv.dtype)
                    self.env[id(v)] = new_var
                    return E.Let(new_var, vv, self.expr(body, pred))
                return E.Let(v, vv, self.expr(body, pred))
            case Ramp() | Broadcast():
                raise Unvectorizable("nested vector")
        raise Unvectorizable(f"cannot vectorize {type(e).__name__}")

    def arith(self, cls: type, a: Expr, b: Expr) -> Expr:
        """Add/Sub/Mul keeping ramps as ramps (so contiguous accesses stay recognisable)."""
        if isinstance(a, Broadcast) and not isinstance(b, Ramp):
            b_scalar = b.value if isinstance(b, Broadcast) else b
            if not self.is_vec(b_scalar):
                return Broadcast(
                    cls(a.value, b_scalar), a.lanes
                )  # bcast(x) + bcast(y) -> bcast(x + y)
        if isinstance(b, Broadcast) and not isinstance(a, Broadcast):
            b = b.value if not self.is_vec(b.value) else b  # ramp + bcast(x) -> ramp + x
        if isinstance(a, Broadcast) and isinstance(b, Ramp):
            a = a.value
        va, vb = self.is_vec(a), self.is_vec(b)
        if not va and not vb:
            return cls(a, b)
        if isinstance(a, Ramp) and not vb:
            if cls is E.Add:
                return Ramp(a.base + b, a.stride, a.lanes)
            if cls is E.Sub:
                return Ramp(a.base - b, a.stride, a.lanes)
            if cls is E.Mul and dt.is_int(b.dtype):
                return Ramp(a.base * b, a.stride * b, a.lanes)
        if isinstance(b, Ramp) and not va:
            if cls is E.Add:
                return Ramp(a + b.base, b.stride, b.lanes)
            if cls is E.Mul and dt.is_int(a.dtype):
                return Ramp(a * b.base, a * b.stride, b.lanes)
        if isinstance(a, Ramp) and isinstance(b, Ramp) and cls in (E.Add, E.Sub):
            return Ramp(cls(a.base, b.base), cls(a.stride, b.stride), a.lanes)
        return cls(self.bcast(a), self.bcast(b))

    # -- statements ------------------------------------------------------------------------------
    def stmt(self, s: Stmt, pred: Expr | None) -> Stmt:
        match s:
            case BufferStore(buffer=buf, indices=(index,), value=value, predicate=p):
                vi = self.expr(index, pred)
                if (
                    not isinstance(vi, Ramp)
                    or isinstance(vi.stride, Const)
                    and vi.stride.value == 0
                ):
                    raise Unvectorizable("store to a lane-invariant or scattered address")
                vv = self.bcast(self.expr(value, pred))
                mask = pred if p is None else (p if pred is None else E.And(pred, p))
                return BufferStore(buf, (vi,), vv, mask)
            case Seq(stmts=stmts):
                return Seq(tuple(self.stmt(x, pred) for x in stmts))
            case IfThenElse(condition=c, then_case=t, else_case=f):
                vc = self.expr(c, pred)
                if not self.is_vec(vc):
                    return IfThenElse(
                        vc, self.stmt(t, pred), None if f is None else self.stmt(f, pred)
                    )
                lanes = _constant_lanes(vc)
                if lanes is not None and all(lanes):  # every lane takes the branch: no mask
                    return self.stmt(t, pred)
                if lanes is not None and not any(lanes):  # no lane does
                    return Seq(()) if f is None else self.stmt(f, pred)
                if f is not None:
                    raise Unvectorizable("lane-dependent if/else")
                return self.stmt(t, vc if pred is None else E.And(pred, vc))
            case LetStmt(var=v, value=value, body=body):
                vv = self.expr(value, pred)
                if self.is_vec(vv):
                    new_var = Var(v.name, vv.dtype)
                    self.env[id(v)] = new_var
                    return LetStmt(new_var, vv, self.stmt(body, pred))
                return LetStmt(v, vv, self.stmt(body, pred))
            case For(var=v, min=lo, extent=extent, body=body):
                vlo, vext = self.expr(lo, pred), self.expr(extent, pred)
                if self.is_vec(vlo) or self.is_vec(vext) or s.kind is LoopKind.PARALLEL:
                    raise Unvectorizable("lane-dependent inner loop")
                kind = LoopKind.SERIAL if s.kind is LoopKind.VECTORIZED else s.kind
                return For(v, vlo, vext, self.stmt(body, pred), kind, s.thread_tag, s.pragmas)
            case Attr(key=k, value=value, body=body):
                return Attr(k, value, self.stmt(body, pred))
            case Prefetch(buffer=buf, indices=(index,), write=write):
                vi = self.expr(index, pred)
                if isinstance(vi, Ramp):  # a contiguous run: its first line (a hint, not a copy)
                    return Prefetch(buf, (vi.base,), write)
                return s if not self.is_vec(vi) else Seq(())
        raise Unvectorizable(f"cannot vectorize {type(s).__name__}")
