"""Symbolic bounds: the interval an expression covers as some variables sweep their ranges.

Bound inference asks this about a consumer's index inside a loop: relaxing only `ii` in [0, 31],
`io*32 + ii` covers `[io*32, io*32 + 31]`; relaxing `io` in [0, 3] too, `[0, 127]`. Variables not
relaxed stay symbolic. Affine expressions get exact bounds, anything else a conservative hull.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tensorforge.ir.arith.interval import Interval
from tensorforge.ir.arith.linear import LinearForm, is_index_dtype
from tensorforge.ir.arith.simplifier import ExprSimplifier
from tensorforge.te import dtype as dt
from tensorforge.te.expr import Cast, Const, Expr, FloorDiv, FloorMod, Max, Min, Mul, Select, Var
from tensorforge.te.visit import walk


def symbolic_bounds(
    e: Expr,
    relax: Mapping[Var, Interval],
    ranges: Mapping[Var, Interval] | None = None,
) -> Interval:
    """The inclusive Interval of `e` as each Var in `relax` takes every value in its Interval.

    The ends may mention variables that are not relaxed; `ranges` tells what is known about
    those (it helps fold a `min` or prove a sign). An end is None where it is unbounded.

    >>> io, ii = Var("io"), Var("ii")
    >>> symbolic_bounds(io * 32 + ii, {ii: Interval.from_range(0, 32)})
    Interval(io * 32, io * 32 + 31)
    """
    return _Relaxer(relax, ranges).interval(e)


class _Relaxer:
    def __init__(self, relax: Mapping[Var, Interval], ranges: Mapping[Var, Interval] | None):
        self.relax = dict(relax)
        self.simplifier = ExprSimplifier({**(ranges or {}), **self.relax})
        self.analyzer = self.simplifier.analyzer
        self.order = _dependents_first(self.relax)
        self._mentions: dict[int, tuple[Expr, bool]] = {}
        self._atoms: dict[int, tuple[Expr, Interval]] = {}

    def interval(self, e: Expr) -> Interval:
        if not is_index_dtype(e.dtype):
            return self._const_interval(e)
        form = self.analyzer.form(e)
        return Interval(self._relax(form, e.dtype, False), self._relax(form, e.dtype, True))

    def _const_interval(self, e: Expr) -> Interval:
        lo, hi = self.analyzer.bounds(e)
        dtype = e.dtype if dt.is_int(e.dtype) else "int32"
        return Interval(
            None if math.isinf(lo) else Const(int(lo), dtype),
            None if math.isinf(hi) else Const(int(hi), dtype),
        )

    def mentions_relaxed(self, e: Expr) -> bool:
        hit = self._mentions.get(id(e))
        if hit is None:
            hit = (e, any(isinstance(n, Var) and n in self.relax for n in walk(e)))
            self._mentions[id(e)] = hit
        return hit[1]

    def _relax(self, form: LinearForm, dtype: str, upper: bool) -> Expr | None:
        """The least upper (greatest lower) bound of `form` free of relaxed variables."""
        for _ in range(8 * (len(self.relax) + len(form.terms)) + 8):
            # a term that is not a var (x // 4, min(a, b)) goes at once, by its own interval
            for key, (term, k) in list(form.terms.items()):
                if not isinstance(term, Var) and self.mentions_relaxed(term):
                    iv = self._atom_interval(term)
                    end = iv.max if (k > 0) == upper else iv.min
                    if end is None:
                        return None
                    form = form.without(key).add(self.analyzer.form(end), k)
            # then one relaxed var, those whose range mentions another relaxed var first
            pending = {
                id(t): k for t, k in form.terms.values() if isinstance(t, Var) and t in self.relax
            }
            if not pending:
                return self.simplifier.visit(self.simplifier.build(form, dtype))
            var = next(v for v in self.order if id(v) in pending)
            k = pending[id(var)]
            end = self.relax[var].max if (k > 0) == upper else self.relax[var].min
            if end is None:
                return None
            form = form.add(LinearForm.of_term(var), -k).add(self.analyzer.form(end), k)
        return None  # cyclic ranges

    def _atom_interval(self, term: Expr) -> Interval:
        hit = self._atoms.get(id(term))
        if hit is None:
            hit = (term, self._compute_atom_interval(term))
            self._atoms[id(term)] = hit
        return hit[1]

    def _compute_atom_interval(self, term: Expr) -> Interval:
        simplify = self.simplifier.visit
        d = term.dtype
        match term:
            case FloorDiv(x, Const(value=c)) if c != 0:
                iv = self.interval(x)
                lo, hi = (iv.min, iv.max) if c > 0 else (iv.max, iv.min)
                return Interval(
                    _apply(FloorDiv, lo, term.b, simplify), _apply(FloorDiv, hi, term.b, simplify)
                )
            case FloorMod(x, Const(value=c)) if c > 0:
                iv = self.interval(x)
                if iv.min is not None and iv.max is not None:
                    blocks = simplify(FloorDiv(iv.max, term.b) - FloorDiv(iv.min, term.b))
                    if isinstance(blocks, Const) and blocks.value == 0:  # no wrap-around
                        return Interval(
                            simplify(FloorMod(iv.min, term.b)), simplify(FloorMod(iv.max, term.b))
                        )
                return Interval(Const(0, d), Const(c - 1, d))
            case Min(a, b) | Max(a, b):
                op = type(term)
                ia, ib = self.interval(a), self.interval(b)
                lo, hi = (
                    _hull_end(op, ia.min, ib.min, op is Max),
                    _hull_end(op, ia.max, ib.max, op is Min),
                )
                return Interval(
                    None if lo is None else simplify(lo), None if hi is None else simplify(hi)
                )
            case Select(true_value=a, false_value=b):
                ia, ib = self.interval(a), self.interval(b)
                lo, hi = (
                    _hull_end(Min, ia.min, ib.min, False),
                    _hull_end(Max, ia.max, ib.max, False),
                )
                return Interval(
                    None if lo is None else simplify(lo), None if hi is None else simplify(hi)
                )
            case Mul(x, y):
                for factor, other in ((x, y), (y, x)):  # one side free of relaxed vars, sign known
                    if not self.mentions_relaxed(other):
                        olo, ohi = self.analyzer.bounds(other)
                        iv = self.interval(factor)
                        if olo >= 0 or ohi <= 0:
                            lo, hi = (iv.min, iv.max) if olo >= 0 else (iv.max, iv.min)
                            return Interval(
                                _apply(Mul, lo, other, simplify), _apply(Mul, hi, other, simplify)
                            )
            case Cast(dtype=target, value=v) if is_index_dtype(target) and is_index_dtype(v.dtype):
                if dt.bits_of(target) >= dt.bits_of(v.dtype):
                    iv = self.interval(v)
                    return Interval(
                        None if iv.min is None else simplify(Cast(target, iv.min)),
                        None if iv.max is None else simplify(Cast(target, iv.max)),
                    )
        return self._const_interval(term)


def _apply(op: type, end: Expr | None, other: Expr, simplify) -> Expr | None:
    return None if end is None else simplify(op(end, other))


def _hull_end(op: type, a: Expr | None, b: Expr | None, either: bool) -> Expr | None:
    """`op(a, b)` for one end of a hull; with `either`, one unbounded side leaves the other."""
    if a is None or b is None:
        return (a if b is None else b) if either else None
    return op(a, b)


def _dependents_first(relax: Mapping[Var, Interval]) -> list[Var]:
    """The relaxed vars ordered so a var comes before any var its own range mentions."""
    mentions = {
        id(v): [
            n
            for end in (iv.min, iv.max)
            if end is not None
            for n in walk(end)
            if isinstance(n, Var) and n in relax
        ]
        for v, iv in relax.items()
    }
    order: list[Var] = []
    state: dict[int, int] = {}  # 1: visiting, 2: done

    def visit(v: Var) -> None:
        if state.get(id(v)):
            return
        state[id(v)] = 1
        for dependent in relax:  # whoever mentions v goes first
            if any(m is v for m in mentions[id(dependent)]) and dependent is not v:
                visit(dependent)
        state[id(v)] = 2
        order.append(v)

    for v in relax:
        visit(v)
    return order
