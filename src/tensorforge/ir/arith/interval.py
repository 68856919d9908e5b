"""Integer intervals of expressions under variable ranges: `const_bounds` and `prove`.

Ranges map a Var to an `Interval(min, max)`, both ends inclusive Exprs (None: unbounded); a loop
`for i in range(m, m + n)` gives `Interval.from_range(m, n)`. An end may mention other variables
(`j` in `[i, i + 3]`), and bounds substitute it before relaxing those (`j - i` is in `[0, 3]`).
Bounds are exact for affine expressions over independent ranges and conservative otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tensorforge.ir.arith.linear import LinearForm, is_index_dtype, linearize, term_key, to_expr
from tensorforge.te import dtype as dt
from tensorforge.te.expr import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    And,
    Cast,
    CompareOp,
    Const,
    Expr,
    FloorDiv,
    FloorMod,
    Let,
    Max,
    Min,
    Mul,
    Not,
    Or,
    Select,
    SizeVar,
    Var,
    structural_key,
)
from tensorforge.te.visit import walk

INF = math.inf
Bound = int | float  # an int, or -inf / inf for unbounded


@dataclass(frozen=True, eq=False)
class Interval:
    """The inclusive range `[min, max]` of an integer; None on a side means unbounded."""

    min: Expr | None
    max: Expr | None

    def __post_init__(self) -> None:
        like = next((e.dtype for e in (self.min, self.max) if isinstance(e, Expr)), "int32")
        for name in ("min", "max"):
            value = getattr(self, name)
            if isinstance(value, int):
                object.__setattr__(self, name, Const(value, like))

    @staticmethod
    def from_range(min: Expr | int, extent: Expr | int) -> Interval:
        """`[min, min + extent - 1]`: the values of `for v in range(min, min + extent)`."""
        lo = min if isinstance(min, Expr) else Const(min, "int32")
        size = extent if isinstance(extent, Expr) else Const(extent, lo.dtype)
        high = linearize(lo).add(linearize(size)).plus_const(-1)
        return Interval(lo, to_expr(high, lo.dtype))

    @staticmethod
    def point(value: Expr | int) -> Interval:
        return Interval(value, value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Interval) and structural_key(self._ends()) == structural_key(
            other._ends()
        )

    def __hash__(self) -> int:
        return hash(structural_key(self._ends()))

    def _ends(self) -> tuple[Any, Any]:
        return (self.min, self.max)

    def __repr__(self) -> str:
        return f"Interval({self.min}, {self.max})"


class Analyzer:
    """Bounds and proofs under one set of ranges; memoizes per expression node."""

    def __init__(self, ranges: Mapping[Var, Interval] | None = None):
        self.ranges: dict[Var, Interval] = dict(ranges or {})
        self._forms: dict[int, tuple[Expr, LinearForm]] = {}
        self._atoms: dict[int, tuple[Expr, tuple[Bound, Bound]]] = {}
        self._free: dict[int, tuple[Expr, frozenset[int]]] = {}
        self._active: set[int] = set()  # vars whose range is being bounded (cycle guard)

    # -- bounds -------------------------------------------------------------------------------
    def form(self, e: Expr) -> LinearForm:
        return linearize(e, self._forms)

    def bounds(self, e: Expr) -> tuple[Bound, Bound]:
        """(lo, hi) of an integer expression; -inf / inf where unbounded."""
        if is_index_dtype(e.dtype):
            return self.form_bounds(self.form(e))
        if dt.is_int(e.dtype) or dt.is_bool(e.dtype):
            return self._atom_bounds(e)  # unsigned sums wrap: no linear forms for them
        return -INF, INF

    def form_bounds(self, form: LinearForm) -> tuple[Bound, Bound]:
        return self._side(form, False, 2), self._side(form, True, 2)

    def _side(self, form: LinearForm, upper: bool, depth: int) -> Bound:
        """The least upper (or greatest lower) bound we can show for `form`."""
        for _ in range(4 * len(self.ranges) + 4):
            if depth > 0:
                for key, (term, k) in form.terms.items():
                    # min(a, b) <= a: an upper bound of `r + k*min(a, b)` (k > 0) is the smaller
                    # of those of `r + k*a` and `r + k*b`; likewise for max and lower bounds.
                    # Split before relaxing r, so `io*32 + min(n - io*32, 32)` keeps `n`.
                    if isinstance(term, (Min, Max)) and isinstance(term, Min) == ((k > 0) == upper):
                        rest = form.without(key)
                        sides = [
                            self._side(rest.add(self.form(x), k), upper, depth - 1)
                            for x in (term.a, term.b)
                        ]
                        return min(sides) if upper else max(sides)
            relaxed = self._substitute_symbolic_end(form, upper)
            if relaxed is None:
                break
            form = relaxed
        form, total = self._quotient_differences(form, upper)
        form = self._quotients_as_remainders(form)
        total += form.const
        for term, k in form.terms.values():
            lo, hi = self._atom_bounds(term)
            total += k * (hi if (k > 0) == upper else lo)
        return total

    def _quotient_differences(self, form: LinearForm, upper: bool) -> tuple[LinearForm, int]:
        """`form` less each pair `k*((x + d) // c) - k*(x // c)` (c > 0, d a constant), and the
        pairs' bound: with x = q*c + r, 0 <= r < c, the pair is k*((r + d) // c), in
        k*[d // c, ceil(d / c)] for every x. A tile's rows `(t*64 + 63) // 49 - t*64 // 49 + 1`
        span 1 or 2 blocks of 49, where the quotients' own bounds say up to 65."""
        total = 0
        quotients = [
            (key, term, k)
            for key, (term, k) in form.terms.items()
            if isinstance(term, FloorDiv)
            and isinstance(term.b, Const)
            and is_index_dtype(term.dtype)
            and term.b.value > 0
        ]
        for key, term, k in quotients:
            if k <= 0 or key not in form.terms:
                continue
            for other_key, other, other_k in quotients:
                if other_k != -k or other.b.value != term.b.value or other_key not in form.terms:
                    continue
                d = self.form(term.a).add(self.form(other.a), -1)
                if not d.is_const:
                    continue
                c = term.b.value
                total += k * (-(-d.const // c) if upper else d.const // c)
                form = form.without(key).without(other_key)
                break
        return form, total

    def _quotients_as_remainders(self, form: LinearForm) -> LinearForm:
        """`k*(x // c)` (c > 0, c | k) as `(k/c)*(x - x % c)` where `x`'s terms meet the rest
        of `form`: exact, and they cancel. The last of 12-row tiles under a run-time row count,
        `12*(n // 12) - 1 - n`, is then `-1 - n % 12` <= -1: its rows are provably inside."""
        for key in list(form.terms):
            if key not in form.terms:  # cancelled by an earlier rewrite (x // 2 in x + 1's)
                continue
            term, k = form.terms[key]
            if not (
                isinstance(term, FloorDiv)
                and isinstance(term.b, Const)
                and is_index_dtype(term.dtype)
                and term.b.value > 0
                and k % term.b.value == 0
            ):
                continue
            inner = self.form(term.a)
            rest = form.without(key)
            if not any(t in rest.terms for t in inner.terms):
                continue
            scale = k // term.b.value
            remainder = LinearForm.of_term(FloorMod(term.a, term.b))
            form = rest.add(inner, scale).add(remainder, -scale)
        return form

    def _end(self, var: Var, upper: bool) -> Expr | None:
        interval = self.ranges[var]
        return interval.max if upper else interval.min

    def _substitute_symbolic_end(self, form: LinearForm, upper: bool) -> LinearForm | None:
        """`form` with one Var whose range end is an expression replaced by that end (a var
        before any var its own range mentions: `j - i` with j in [i, i + 3] gives `3`), or None
        if there is none."""
        pending: dict[int, tuple[Var, int, Expr]] = {}
        for term, k in form.terms.values():
            if isinstance(term, Var) and term in self.ranges:
                end = self._end(term, (k > 0) == upper)
                if end is not None and not isinstance(end, Const):
                    pending[id(term)] = (term, k, end)
        if not pending:
            return None
        mentioned = set().union(*(self._free_vars(end) for _, _, end in pending.values()))
        ready = [p for key, p in pending.items() if key not in mentioned]
        if not ready:
            return None  # cyclic ranges: leave them to the term-wise bound
        var, k, end = ready[0]
        return form.add(LinearForm.of_term(var), -k).add(self.form(end), k)

    def _free_vars(self, e: Expr) -> frozenset[int]:
        hit = self._free.get(id(e))
        if hit is None:
            hit = (e, frozenset(id(n) for n in walk(e) if isinstance(n, Var)))
            self._free[id(e)] = hit
        return hit[1]

    def _atom_bounds(self, term: Expr) -> tuple[Bound, Bound]:
        hit = self._atoms.get(id(term))
        if hit is None:
            hit = (term, self._compute_atom_bounds(term))
            self._atoms[id(term)] = hit
        return hit[1]

    def _compute_atom_bounds(self, term: Expr) -> tuple[Bound, Bound]:
        match term:
            case Const(value=v):
                return (int(v), int(v)) if not dt.is_float(term.dtype) else (-INF, INF)
            case Var() if term in self.ranges:
                if id(term) in self._active:
                    return _dtype_bounds(term.dtype)
                self._active.add(id(term))
                try:
                    low, high = self._end(term, False), self._end(term, True)
                    lo = -INF if low is None else self._side(self.form(low), False, 2)
                    hi = INF if high is None else self._side(self.form(high), True, 2)
                finally:
                    self._active.discard(id(term))
                return lo, hi
            case SizeVar(min_value=least):  # a size with no range in scope: n >= least
                return least, INF
            case FloorDiv(x, y) if is_index_dtype(term.dtype):
                return _floordiv_bounds(self.bounds(x), self.bounds(y))
            case FloorMod(x, y) if is_index_dtype(term.dtype):
                return _floormod_bounds(self.bounds(x), self.bounds(y))
            case Mul(x, y) if is_index_dtype(term.dtype):
                return _mul_bounds(self.bounds(x), self.bounds(y))
            case Min(a, b) if is_index_dtype(term.dtype):
                (alo, ahi), (blo, bhi) = self.bounds(a), self.bounds(b)
                return min(alo, blo), min(ahi, bhi)
            case Max(a, b) if is_index_dtype(term.dtype):
                (alo, ahi), (blo, bhi) = self.bounds(a), self.bounds(b)
                return max(alo, blo), max(ahi, bhi)
            case Select(condition=c, true_value=a, false_value=b) if dt.lanes_of(c.dtype) == 1:
                if self.prove(c):
                    return self.bounds(a)
                if self.disprove(c):
                    return self.bounds(b)
                (alo, ahi), (blo, bhi) = self.bounds(a), self.bounds(b)
                return min(alo, blo), max(ahi, bhi)
            case Cast(dtype=target, value=v) if dt.is_int(target) and dt.lanes_of(target) == 1:
                if dt.is_int(v.dtype) or dt.is_bool(v.dtype):
                    lo, hi = self.bounds(v)
                    tlo, thi = _dtype_bounds(target)
                    if tlo <= lo and hi <= thi:
                        return lo, hi
                return _dtype_bounds(target)
            case Let(var=v, value=value, body=body):
                self.ranges.setdefault(v, Interval(value, value))  # a Let var is bound once
                return self.bounds(body)
            case CompareOp() | And() | Or() | Not() if dt.lanes_of(term.dtype) == 1:
                return (1, 1) if self.prove(term) else (0, 0) if self.disprove(term) else (0, 1)
        return _dtype_bounds(term.dtype)

    # -- proofs -------------------------------------------------------------------------------
    def prove(self, cond: Expr) -> bool:
        """True only if `cond` holds for every value in range."""
        return self._decide(cond, True)

    def disprove(self, cond: Expr) -> bool:
        """True only if `cond` fails for every value in range."""
        return self._decide(cond, False)

    def _decide(self, cond: Expr, want: bool) -> bool:
        match cond:
            case Const(value=v) if dt.is_bool(cond.dtype):
                return bool(v) == want
            case And(a, b):
                if want:
                    return self._decide(a, True) and self._decide(b, True)
                return self._decide(a, False) or self._decide(b, False)
            case Or(a, b):
                if want:
                    return self._decide(a, True) or self._decide(b, True)
                return self._decide(a, False) and self._decide(b, False)
            case Not(a):
                return self._decide(a, not want)
            case LT(a, b) | GE(a, b) if is_index_dtype(a.dtype) and want == isinstance(cond, LT):
                return self._less(a, b, _STRUCTURE_DEPTH)  # a < b; not a >= b
            case GT(a, b) | LE(a, b) if is_index_dtype(a.dtype) and want == isinstance(cond, GT):
                return self._less(b, a, _STRUCTURE_DEPTH)
            case CompareOp(a, b) if is_index_dtype(a.dtype):
                lo, hi = self.form_bounds(self.form(a).add(self.form(b), -1))
                return _decide_compare(type(cond), lo, hi, want)
        return False

    def _less(self, a: Expr, b: Expr, depth: int) -> bool:
        """`a < b`, from the bounds of `a - b` or else from the structure of `a` under a
        divisor known only to be positive (a row index taken from a fused loop over run-time
        sizes, `int32(f // int64(n)) // m < 1` with f < m*n):
            x % y < b      where 1 <= y <= b
            x // y < b     where y >= 1 and x < b*y
            int32(z) < b   where z < int64(b) and z >= the int32 minimum (the cast keeps z)"""
        if self.form_bounds(self.form(a).add(self.form(b), -1))[1] < 0:
            return True
        if depth == 0:
            return False
        match a:
            case FloorMod(x, y) if not isinstance(y, Const) and self.bounds(y)[0] >= 1:
                return self.form_bounds(self.form(y).add(self.form(b), -1))[1] <= 0
            case FloorDiv(x, y) if not isinstance(y, Const) and self.bounds(y)[0] >= 1:
                factor = self.form(b)
                if factor.is_const:  # x // y < c: x < c*y
                    return self._less(
                        x, to_expr(self.form(y).scaled(factor.const), y.dtype), depth - 1
                    )
                return any(self._less(x, p, depth - 1) for p in (Mul(b, y), Mul(y, b)))
            case Cast(dtype=narrow, value=z) if (
                is_index_dtype(narrow)
                and is_index_dtype(z.dtype)
                and dt.bits_of(z.dtype) > dt.bits_of(narrow)
                and b.dtype == narrow
            ):
                # int64(n*2 - 1) -> int64(n)*2 - 1: term by term, so it meets z's terms
                form = self.form(b)
                terms = {}
                for term, k in form.terms.values():
                    term = Cast(z.dtype, term)
                    terms[term_key(term)] = (term, k)
                wide = to_expr(LinearForm(terms, form.const), z.dtype)
                least = dt.int_range(narrow)[0]
                return self.bounds(z)[0] >= least and self._less(z, wide, depth - 1)
        return False


_STRUCTURE_DEPTH = 4  # nested quotients, remainders and casts `_less` looks through


def _decide_compare(op: type, lo: Bound, hi: Bound, want: bool) -> bool:
    """Whether `diff op 0` is always `want` for every diff in [lo, hi]."""
    always_true = {
        LT: hi < 0,
        LE: hi <= 0,
        GT: lo > 0,
        GE: lo >= 0,
        EQ: lo == hi == 0,
        NE: lo > 0 or hi < 0,
    }
    always_false = {
        LT: lo >= 0,
        LE: lo > 0,
        GT: hi <= 0,
        GE: hi < 0,
        EQ: lo > 0 or hi < 0,
        NE: lo == hi == 0,
    }
    return (always_true if want else always_false)[op]


def _dtype_bounds(dtype: str) -> tuple[Bound, Bound]:
    if dt.is_bool(dtype):
        return 0, 1
    if dt.is_unsigned(dtype):
        return 0, INF
    return -INF, INF


def _mul(x: Bound, y: Bound) -> Bound:
    return 0 if x == 0 or y == 0 else x * y  # 0 * inf is 0 for interval products


def _mul_bounds(a: tuple[Bound, Bound], b: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    products = [_mul(x, y) for x in a for y in b]
    return min(products), max(products)


def _floordiv(n: Bound, d: Bound) -> Bound:
    """floor(n / d) for d != 0, with infinities."""
    if math.isinf(n):
        return n if d > 0 else -n
    if math.isinf(d):
        return 0 if n == 0 or (n > 0) == (d > 0) else -1
    return n // d


def _floordiv_bounds(n: tuple[Bound, Bound], d: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    dlo, dhi = d
    if dlo > 0 or dhi < 0:  # the divisor keeps one sign: the extremes lie at the corners
        corners = [_floordiv(x, y) for x in n for y in d]
        return min(corners), max(corners)
    return -INF, INF


def _floormod_bounds(n: tuple[Bound, Bound], d: tuple[Bound, Bound]) -> tuple[Bound, Bound]:
    (lo, hi), (dlo, dhi) = n, d
    if dlo == dhi and not math.isinf(dlo) and dlo != 0:
        c = int(dlo)
        if not math.isinf(lo) and not math.isinf(hi) and lo // c == hi // c:
            return lo % c, hi % c  # no wrap-around inside [lo, hi]
        return (0, c - 1) if c > 0 else (c + 1, 0)
    if dlo > 0:
        return 0, (dhi - 1 if lo < 0 else min(dhi - 1, hi))
    if dhi < 0:
        return dlo + 1, 0
    m = max(abs(dlo), abs(dhi))
    return -(m - 1), m - 1


def _finite(b: Bound) -> int | None:
    return None if math.isinf(b) else int(b)


def const_bounds(
    e: Expr, ranges: Mapping[Var, Interval] | None = None
) -> tuple[int | None, int | None]:
    """The integer interval (lo, hi) of `e`, both inclusive; None on a side where unbounded.

    >>> i = Var("i"); const_bounds(i * 4 + 3, {i: Interval.from_range(0, 8)})
    (3, 31)
    """
    lo, hi = Analyzer(ranges).bounds(e)
    return _finite(lo), _finite(hi)


def prove(cond: Expr, ranges: Mapping[Var, Interval] | None = None) -> bool:
    """True only if the boolean `cond` provably holds for all values in `ranges`."""
    return Analyzer(ranges).prove(cond)
