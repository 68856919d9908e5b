"""Integer quotients and remainders by a constant, as linear forms: `x // c` and `x % c` for
c > 0 (floor division, exact for negative x), and the digits of a fused index merged back.

The simplifier (simplifier.py) calls these with itself as `s`: they read the forms and bounds
of its terms (`s.form`, `s.analyzer`) and build the terms they make (`s.build`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tensorforge.ir.arith.linear import LinearForm, fits, term_key
from tensorforge.te.expr import Const, Expr, FloorDiv, FloorMod

if TYPE_CHECKING:
    from tensorforge.ir.arith.simplifier import ExprSimplifier


def merge_div_mod(form: LinearForm, s: ExprSimplifier) -> LinearForm:
    """Fold the digits of a fused index back, for constants a, b > 0 and any integer x (floor
    division and modulo make each an identity, negative x included), k a common coefficient:

    k*a*(x // a) + k*(x % a)              -> k*x
    k*a*(x // a % b) + k*(x % a)          -> k*(x % (a*b))
    k*b*(x // (a*b)) + k*(x // a % b)     -> k*(x // a)

    (x // a) * a + x % a is the pair a split of a fused index leaves; the other two are the
    digits of a 4-d (n, c, h, w) flat index taken from one fused loop variable, folded one
    digit at a time until the index is the variable again."""
    changed = True
    while changed:
        changed = False
        for key, (term, k) in list(form.terms.items()):
            if key not in form.terms or not _is_const_op(term, FloorMod):
                continue
            merged = _merge_digit(form, key, term, k, s)
            if merged is not None:
                form, changed = merged, True
    return form


def _is_const_op(term: Expr, kind: type) -> bool:
    """`term` is `kind(x, c)` with a positive constant c."""
    return isinstance(term, kind) and isinstance(term.b, Const) and term.b.value > 0


def _merge_digit(form: LinearForm, key, term: FloorMod, k: int, s: ExprSimplifier):
    """`form` with the digit `k * term` (term = y % b) merged with its neighbour, or None."""
    y, b, dtype = term.a, term.b.value, term.dtype
    div_key = ("FloorDiv",) + key[1:]  # y // b, next to y % b
    div = form.terms.get(div_key)
    if div is not None and div[1] == k * b:
        return form.without(key).without(div_key).add(s.form(y), k)
    if not _is_const_op(y, FloorDiv):
        return None
    x, a = y.a, y.b.value
    if k % a == 0 and fits(LinearForm(const=a * b), dtype):  # k*(x // a % b) + (k/a)*(x % a)
        low = FloorMod(x, Const(a, dtype))
        low_key = term_key(low)
        found = form.terms.get(low_key)
        if found is not None and found[1] * a == k:
            folded = floormod_form(s.form(x), a * b, dtype, s)
            return form.without(key).without(low_key).add(folded, found[1])
    if fits(LinearForm(const=a * b), dtype):  # k*(x // a % b) + k*b*(x // (a*b))
        high = FloorDiv(x, Const(a * b, dtype))
        high_key = term_key(high)
        found = form.terms.get(high_key)
        if found is not None and found[1] == k * b:
            return form.without(key).without(high_key).add(s.form(y), k)
    return None


def _split_multiples(form: LinearForm, c: int) -> tuple[LinearForm, LinearForm]:
    """(q, r) with form == c*q + r, q taking every term whose coefficient c divides."""
    quotient, rest = {}, {}
    for key, (term, k) in form.terms.items():
        if k % c == 0:
            quotient[key] = (term, k // c)
        else:
            rest[key] = (term, k)
    return LinearForm(quotient), LinearForm(rest, form.const)


def _divide_gcd(form: LinearForm, c: int) -> tuple[LinearForm, int, int]:
    """(form / g, c / g, g) for g the gcd of c and every coefficient of form."""
    g = math.gcd(c, form.const, *form.coefficients())
    if g <= 1:
        return form, c, 1
    terms = {key: (t, k // g) for key, (t, k) in form.terms.items()}
    return LinearForm(terms, form.const // g), c // g, g


def _common_factor(
    form: LinearForm, c: int, s: ExprSimplifier
) -> tuple[LinearForm, int, LinearForm] | None:
    """(y, h, r) with form == h*y + r, 0 <= r < h by the ranges and h > 1 a proper divisor of c:
    h the largest gcd of c and some coefficients for which the terms whose coefficients h does
    not divide, with the constant, lie in one block of h (a constant always does); None if none.

    Then, for every integer value of y, negative ones too (floor division and modulo):
        (h*y + r) // (h*c') == y // c'        (h*y + r) % (h*c') == h*(y % c') + r
    since 0 <= r < h never carries h*y past the next multiple of h, and
    floor(floor(z / h) / c') == floor(z / (h*c')). A bound inference's `(16*k + 15) // 64`
    (the last row of a 16-row tile, in 64-row blocks) is k // 4, and so is `(16*k + i) // 64`
    for i in [0, 15] (a k slice of 16 read through a reshape into rows of 64).
    """
    coefficients = list(form.coefficients())
    candidates = {math.gcd(c, k) for k in coefficients} | {math.gcd(c, *coefficients)}
    for h in sorted((h for h in candidates if 1 < h < c), reverse=True):
        multiples, rest = _split_multiples(form, h)
        block = rest.const // h if rest.is_const else _one_block(rest, h, s)
        if block is not None:
            return multiples.plus_const(block), h, rest.plus_const(-block * h)
    return None


def _one_block(rest: LinearForm, c: int, s: ExprSimplifier) -> int | None:
    """q if every value of `rest` lies in [q*c, q*c + c - 1], from the ranges."""
    lo, hi = s.analyzer.form_bounds(rest)
    if math.isinf(lo) or math.isinf(hi) or lo // c != hi // c:
        return None
    return int(lo) // c


def floordiv_form(x: LinearForm, c: int, dtype: str, s: ExprSimplifier) -> LinearForm:
    """The form of `x // c` for a constant c > 0 (floor division: exact for negatives too)."""
    x, c, _ = _divide_gcd(x, c)  # (i*4 + 2) // 8 -> (i*2 + 1) // 4
    common = _common_factor(x, c, s)
    if common is not None:  # (i*16 + 15) // 64 -> i // 4: the 15 never carries past 16
        x, h, _ = common
        return floordiv_form(x, c // h, dtype, s)
    if c == 1:
        return x
    quotient, rest = _split_multiples(x, c)  # (a*c + b) // c -> a + b // c
    block = _one_block(rest, c, s)
    if block is not None:
        return quotient.plus_const(block)  # with 0 <= b < c: b // c -> 0
    inner = rest.single_term()
    if isinstance(inner, FloorDiv) and isinstance(inner.b, Const) and inner.b.value > 0:
        # (x // c1) // c2 -> x // (c1*c2)
        return quotient.add(floordiv_form(s.form(inner.a), inner.b.value * c, dtype, s))
    return quotient.add(LinearForm.of_term(FloorDiv(s.build(rest, dtype), Const(c, dtype))))


def floormod_form(x: LinearForm, c: int, dtype: str, s: ExprSimplifier) -> LinearForm:
    """The form of `x % c` for a constant c > 0 (result in [0, c))."""
    x, c, g = _divide_gcd(x, c)
    if g > 1:  # (i*4 + 2) % 8 -> ((i*2 + 1) % 4)*2
        return floormod_form(x, c, dtype, s).scaled(g)
    if c == 1:
        return LinearForm()
    common = _common_factor(x, c, s)
    if common is not None:  # (i*16 + 15) % 64 -> (i % 4)*16 + 15
        y, h, r = common
        return floormod_form(y, c // h, dtype, s).scaled(h).add(r)
    _, rest = _split_multiples(x, c)  # (a*c + b) % c -> b % c
    rest = LinearForm(rest.terms, rest.const % c)
    if rest.is_const:
        return rest
    block = _one_block(rest, c, s)
    if block is not None:
        return rest.plus_const(-block * c)  # with 0 <= b < c: b % c -> b
    inner = rest.single_term()
    if isinstance(inner, FloorMod) and isinstance(inner.b, Const) and inner.b.value % c == 0:
        return floormod_form(s.form(inner.a), c, dtype, s)  # (x % 8) % 4 -> x % 4
    return LinearForm.of_term(FloorMod(s.build(rest, dtype), Const(c, dtype)))
