"""legalize_bfloat16: compute bfloat16 in float32, for backends without bfloat16 arithmetic.

bfloat16 stays the storage type (loads and stores keep their 16-bit buffers) and every value is
computed in float32, rounded back to bfloat16 after each operation so results match bfloat16
arithmetic:

    B[i] = A[i] * c                ->   B[i] = bf16(f32(bf16(f32(A[i]) * f32(c))))

A cast to bfloat16 becomes a rounding (`Cast(float32, Cast(bfloat16, x))`); the only casts left
that touch bfloat16 convert between it and float32, which a code generator does with bit
operations.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.extern import AddressOf
from tensorforge.ir.stmt import BufferStore, LetStmt, Stmt
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Call, Cast, Const, Expr, Let, Select, Var
from tensorforge.te.visit import map_children


def legalize_bfloat16(stmt: Stmt) -> Stmt:
    """`stmt` with every bfloat16 value computed in float32 (storage stays bfloat16)."""
    return _Legalizer().fix(stmt)


def _is_bf16(x: Any) -> bool:
    return isinstance(x, Expr) and dt.element_of(x.dtype) == "bfloat16"


def _wide_dtype(dtype: str) -> str:
    return dt.with_lanes("float32", dt.lanes_of(dtype))


def _round(x: Expr) -> Expr:
    """`x` (float32) rounded to the nearest bfloat16 and widened back."""
    lanes = dt.lanes_of(x.dtype)
    return Cast(_wide_dtype(x.dtype), Cast(dt.with_lanes("bfloat16", lanes), x))


def _narrowed(wide: Expr) -> Expr | None:
    """The bfloat16 expression that `wide` widens where it only moves bfloat16 values (a
    widened bfloat16 value, a constant, a select of those), so storing it needs no rounding:
    f32(A[i]) if c else 0.0 -> A[i] if c else bf16(0.0) (a vectorized zero-padding copy stays
    a 16-bit select, 1031^2: 0.48 -> 0.06 ms)."""
    match wide:
        case Cast(value=value) if _is_bf16(value):
            return value
        case Const():  # already a bfloat16 value (wide() rounds constants)
            return Cast(dt.with_lanes("bfloat16", dt.lanes_of(wide.dtype)), wide)
        case Select(condition=condition, true_value=a, false_value=b):
            a, b = _narrowed(a), _narrowed(b)
            return None if a is None or b is None else Select(condition, a, b)
    return None


class _Legalizer:
    def __init__(self) -> None:
        self.vars: dict[Var, Var] = {}  # bfloat16 variable -> its float32 stand-in

    def fix(self, node: Any) -> Any:
        """A node whose own type is not bfloat16, with its bfloat16 children widened."""
        match node:
            case BufferStore(value=value) if _is_bf16(value):
                wide = self.wide(value)
                # store bf16(x), a load or a select of those, not bf16(f32(bf16(x)))
                narrow = _narrowed(wide)
                if narrow is None:
                    narrow = Cast(value.dtype, wide)
                return dataclasses.replace(
                    node,
                    indices=tuple(self.fix(i) for i in node.indices),
                    value=self._storable(narrow, value.dtype),
                    predicate=None if node.predicate is None else self.fix(node.predicate),
                )
            case LetStmt(var=var) if _is_bf16(var):
                new = Var(var.name, _wide_dtype(var.dtype))
                self.vars[var] = new
                return LetStmt(new, self.wide(node.value), self.fix(node.body))
            case AddressOf(load=load, access=access):
                return AddressOf(map_children(load, self.child), access)
        return map_children(node, self.child)

    def child(self, c: Any) -> Any:
        return self.wide(c) if _is_bf16(c) else self.fix(c)

    @staticmethod
    def _storable(narrow: Expr, dtype: str) -> Expr:
        return narrow if narrow.dtype == dtype else Cast(dtype, narrow)

    def wide(self, e: Expr) -> Expr:
        """The float32 expression of a bfloat16 one (each operation's result rounded)."""
        wide_dtype = _wide_dtype(e.dtype)
        match e:
            case BufferLoad():
                return Cast(wide_dtype, map_children(e, self.child))
            case Const(value=value):
                return Const(dt.round_scalar(value, "bfloat16"), wide_dtype)
            case Var():
                return self.vars.get(e, e)
            case Cast(value=value) if _is_bf16(value):
                return self.wide(value)
            case Cast(value=value):
                source = self.fix(value)
                if source.dtype != wide_dtype:
                    source = Cast(wide_dtype, source)
                return _round(source)
            case Let(var=var, value=value, body=body) if _is_bf16(var):
                new = Var(var.name, _wide_dtype(var.dtype))
                self.vars[var] = new
                return Let(new, self.wide(value), self.wide(body))
            case Let(var=var, value=value, body=body):
                return Let(var, self.fix(value), self.wide(body))
            case Select(condition=condition, true_value=a, false_value=b):
                # moves values: a select of bfloat16 values is one, no rounding after it
                return Select(self.fix(condition), self.wide(a), self.wide(b))
            case Call():
                wide = dataclasses.replace(
                    e, dtype=wide_dtype, args=tuple(self.child(a) for a in e.args)
                )
                return _round(wide)
        return _round(map_children(e, self.child))
