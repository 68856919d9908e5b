"""Canonical linear forms of integer expressions: `sum(coeff * term) + const`.

A term is any expression that is not itself linear (a Var, `x // 4`, `min(a, b)`, `a * b`, a load).
`(io*8 + ii)*4` and `ii*4 + io*32` have the same form, and `to_expr` prints both the same way:
terms by decreasing |coefficient|, then by name, positive terms first (`n - i`, not `-i + n`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensorforge.ir.arith.const_fold import wrap_int
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Add, BinaryOp, Cast, Const, Expr, Mul, Sub, Var, structural_key


def is_index_dtype(dtype: str) -> bool:
    """Signed scalar integers: the dtypes whose arithmetic we treat as exact integer arithmetic."""
    return dtype in ("int8", "int16", "int32", "int64")


def widens_index(narrow: str, wide: str) -> bool:
    """A cast from the index dtype `narrow` to the wider index dtype `wide` (int32 -> int64)."""
    return is_index_dtype(narrow) and is_index_dtype(wide) and dt.bits_of(narrow) < dt.bits_of(wide)


def term_key(term: Expr) -> Any:
    """The key two equal terms share (Vars by identity)."""
    return ("Var", id(term)) if isinstance(term, Var) else structural_key(term)


class LinearForm:
    """`sum(coeff * term) + const` over exact integers. Treated as immutable once built."""

    __slots__ = ("const", "terms")

    def __init__(self, terms: dict[Any, tuple[Expr, int]] | None = None, const: int = 0):
        self.terms = terms if terms is not None else {}  # key -> (term, nonzero coeff)
        self.const = const

    @staticmethod
    def of_term(term: Expr, coeff: int = 1) -> LinearForm:
        return LinearForm({term_key(term): (term, coeff)}) if coeff else LinearForm()

    @property
    def is_const(self) -> bool:
        return not self.terms

    def single_term(self) -> Expr | None:
        """The term `t` if this form is exactly `1*t + 0`."""
        if self.const == 0 and len(self.terms) == 1:
            ((term, coeff),) = self.terms.values()
            if coeff == 1:
                return term
        return None

    def add(self, other: LinearForm, scale: int = 1) -> LinearForm:
        """`self + scale * other`."""
        if scale == 0 or (other.is_const and other.const == 0):
            return self
        terms = dict(self.terms)
        for key, (term, coeff) in other.terms.items():
            old = terms.get(key)
            total = (old[1] if old else 0) + scale * coeff
            if total:
                terms[key] = (old[0] if old else term, total)
            elif old:
                del terms[key]
        return LinearForm(terms, self.const + scale * other.const)

    def scaled(self, k: int) -> LinearForm:
        if k == 1:
            return self
        if k == 0:
            return LinearForm()
        return LinearForm({key: (t, c * k) for key, (t, c) in self.terms.items()}, self.const * k)

    def plus_const(self, c: int) -> LinearForm:
        return self if c == 0 else LinearForm(self.terms, self.const + c)

    def without(self, key: Any) -> LinearForm:
        terms = dict(self.terms)
        del terms[key]
        return LinearForm(terms, self.const)

    def coefficients(self) -> list[int]:
        return [c for _, c in self.terms.values()]

    def __repr__(self) -> str:
        parts = [f"{c}*{t}" for t, c in self.terms.values()]
        return f"LinearForm({' + '.join(parts + [str(self.const)])})"


def linearize(e: Expr, cache: dict[int, tuple[Expr, LinearForm]] | None = None) -> LinearForm:
    """The linear form of an integer expression, looking through Add, Sub and Mul by constants."""
    if cache is not None:
        hit = cache.get(id(e))
        if hit is not None:
            return hit[1]
    match e:
        case Const(value=v) if not isinstance(v, bool):
            form = LinearForm(const=int(v))
        case Add(a, b):
            form = linearize(a, cache).add(linearize(b, cache))
        case Sub(a, b):
            form = linearize(a, cache).add(linearize(b, cache), -1)
        case Mul(a, b):
            fa, fb = linearize(a, cache), linearize(b, cache)
            if fa.is_const:
                form = fb.scaled(fa.const)
            elif fb.is_const:
                form = fa.scaled(fb.const)
            else:
                form = LinearForm.of_term(e)
        case _:
            form = LinearForm.of_term(e)
    if cache is not None:
        cache[id(e)] = (e, form)
    return form


def fits(form: LinearForm, dtype: str) -> bool:
    """Whether every constant of `form` (coefficients and offset) is a value of `dtype`."""
    lo, hi = -(1 << (dt.bits_of(dtype) - 1)), (1 << (dt.bits_of(dtype) - 1)) - 1
    return lo <= form.const <= hi and all(lo <= c <= hi for c in form.coefficients())


def _name_key(term: Expr) -> str:
    if isinstance(term, Var):
        return term.name
    from tensorforge.ir.printer import expr_to_str  # the printer imports te: import lazily

    return expr_to_str(term)


def _const(value: int, dtype: str) -> Const:
    return Const(wrap_int(value, dtype), dtype)  # int32 arithmetic wraps in the kernel too


def _scaled_term(term: Expr, coeff: int, dtype: str) -> Expr:
    if term.dtype != dtype:
        term = Cast(dtype, term)
    return term if coeff == 1 else Mul(term, _const(coeff, dtype))


def to_expr(form: LinearForm, dtype: str) -> Expr:
    """The canonical expression of `form`: `io*32 + ii*4 - j + 3`."""
    items = list(form.terms.values())
    if len(items) > 1:
        items.sort(key=lambda tc: (-abs(tc[1]), _name_key(tc[0])))  # stable: ties keep order
    positive = [(t, c) for t, c in items if c > 0]
    negative = [(t, -c) for t, c in items if c < 0]
    if positive:
        out = _scaled_term(*positive[0], dtype)
        rest = positive[1:]
    elif form.const > 0 or not negative:
        out = _const(form.const, dtype)
        return _subtract_all(out, negative, dtype)
    else:  # only negative terms and no positive constant: -i - 1 -> i*-1 - 1
        first, coeff = negative.pop(0)
        out = _scaled_term(first, -coeff, dtype)
        rest = []
    for term, coeff in rest:
        out = Add(out, _scaled_term(term, coeff, dtype))
    out = _subtract_all(out, negative, dtype)
    if form.const > 0:
        out = Add(out, _const(form.const, dtype))
    elif form.const < 0:
        out = Sub(out, _const(-form.const, dtype))
    return out


def _subtract_all(out: Expr, negative: list[tuple[Expr, int]], dtype: str) -> Expr:
    for term, coeff in negative:
        out = Sub(out, _scaled_term(term, coeff, dtype))
    return out


def same_expr(a: Any, b: Any) -> bool:
    """Structural equality that stops at shared subtrees (`is`), so rebuilt sums compare cheaply."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, BinaryOp):
        return same_expr(a.a, b.a) and same_expr(a.b, b.b)
    if isinstance(a, Var):
        return False
    if isinstance(a, Const):
        return a.dtype == b.dtype and a.value == b.value and type(a.value) is type(b.value)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))
    if not isinstance(a, Expr):
        return a == b if not dataclasses.is_dataclass(a) else False
    return all(same_expr(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))


__all__ = ["LinearForm", "fits", "is_index_dtype", "linearize", "same_expr", "term_key", "to_expr"]
