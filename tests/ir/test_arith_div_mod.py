"""Quotients by a constant: a divisor sharing a factor h with every coefficient of the
dividend, (h*y + r) // (h*c) -> y // c and (h*y + r) % (h*c) -> h*(y % c) + r (r = the
constant mod h), and two quotients whose dividends differ by a constant bounded together. The
folds, and exhaustive comparisons on small coefficients, divisors, constants and values,
negative ones included (with floor division and modulo each fold is an identity)."""

import itertools

import numpy as np

from tensorforge.ir.arith import Interval, const_bounds, simplify_expr, symbolic_bounds
from tensorforge.te.expr import Var, const
from tests.ir.test_arith import evaluate, same

x, y = Var("x"), Var("y")


def test_a_constant_below_the_common_factor_never_carries():
    # the last row of a 16-row tile in blocks of 64 rows (a bound inference's tile end)
    assert same(simplify_expr((x * 16 + 15) // 64), x // 4)
    assert same(simplify_expr((x * 16 + 15) % 64), (x % 4) * 16 + 15)
    assert same(simplify_expr((x * 4 - 1) // 8), (x - 1) // 2)  # a negative constant floors
    assert same(simplify_expr((x * 4 + 3) // 4), x)  # the divisor itself: c' = 1
    assert same(simplify_expr((x * 4 + 7) % 4), const(3))
    assert same(simplify_expr((x * 6 + y * 12 + 5) // 24), (y * 2 + x) // 4)
    # an rfactor's unrolled accumulator through a split of 64 x 64 planes folds back to one row
    plane = (x * 4 + 3) // 256 * 4096 + (x * 4 + 3) % 256 // 4 * 64 + 48
    assert same(simplify_expr(plane), x * 64 + 48)


def test_terms_below_the_common_factor_never_carry_either():
    # a k slice of 16 (k*16 + i, i in [0, 15]) read through a reshape into rows of 64
    i, j = Var("i"), Var("j")
    ranges = {i: Interval.from_range(0, 16), j: Interval.from_range(0, 4)}
    assert same(simplify_expr((x * 16 + i) // 64, ranges), x // 4)
    assert same(simplify_expr((x * 16 + i) % 64, ranges), (x % 4) * 16 + i)
    assert same(simplify_expr((x * 16 + j * 4 + 3) // 64, ranges), x // 4)
    carries = (x * 16 + i + 1) // 64  # i + 1 reaches 16
    assert same(simplify_expr(carries, ranges), carries)
    # the largest factor whose rest fits: 8 with j in [0, 1] (4*j + 3 <= 7), else 4
    assert same(simplify_expr((x * 8 + j * 4 + 3) // 32, {j: Interval.from_range(0, 2)}), x // 4)
    assert same(simplify_expr((x * 8 + j * 4 + 3) // 32, ranges), (x * 2 + j) // 8)


def test_no_common_factor_is_left_alone():
    for e in ((x * 3 + 1) // 4, (x * 4 + y + 1) // 8, (x * 5 + 2) % 6):
        assert same(simplify_expr(e), e)


def test_the_tile_end_of_a_16_row_tile_in_64_row_blocks_is_one_block():
    # relaxing the tile's rows r in [0, 15] at tile k: rows k*16 .. k*16 + 15, all in block k // 4
    r = Var("r")
    block = symbolic_bounds((x * 16 + r) // 64, {r: Interval.from_range(0, 16)})
    assert same(block.min, x // 4) and same(block.max, x // 4)
    rows = symbolic_bounds((x * 16 + r) % 64, {r: Interval.from_range(0, 16)})
    assert same(simplify_expr(rows.max - rows.min + 1), const(16))


def test_every_fold_is_an_identity_exhaustively():
    # a*x + b*y + k for a in [-6, 6], b in {0, 2, -3}, k in [-13, 13] and divisors 1..12 (a
    # sharing a factor with it or not, k a multiple of a or not), x in [-20, 20], y in [-5, 5]:
    # the values as arrays, which evaluate with the IR's floor semantics (NumPy's // and %)
    vx, vy = (v.ravel() for v in np.meshgrid(np.arange(-20, 21), np.arange(-5, 6)))
    env = {id(x): vx, id(y): vy}
    folded = 0
    for a, b, k, c in itertools.product(range(-6, 7), (0, 2, -3), range(-13, 14), range(1, 13)):
        dividend = vx * a + vy * b + k
        for before, want in (
            ((x * a + y * b + k) // c, dividend // c),
            ((x * a + y * b + k) % c, dividend % c),
        ):
            after = simplify_expr(before)
            folded += not same(after, before)
            assert np.array_equal(evaluate(after, env) + 0 * vx, want), (before, after)
    assert folded > 10000  # of 25,272: the rules did fire


def test_every_fold_under_ranges_is_an_identity_exhaustively():
    # a*x + b*i + k with i in [lo, lo + n): a, b, k and c small, every x in [-20, 20], every i
    i = Var("i")
    vx = np.arange(-20, 21)
    folded = 0
    for a, b, k, c, lo, n in itertools.product(
        (4, 6, 8, -8, 16), (1, 2, 3), (-5, 0, 3), (4, 8, 12, 16, 32), (-2, 0, 1), (1, 2, 4)
    ):
        ranges = {i: Interval.from_range(lo, n)}
        for vi in range(lo, lo + n):
            env = {id(x): vx, id(i): vi}
            dividend = vx * a + vi * b + k
            for before, want in (
                ((x * a + i * b + k) // c, dividend // c),
                ((x * a + i * b + k) % c, dividend % c),
            ):
                after = simplify_expr(before, ranges)
                folded += not same(after, before)
                assert np.array_equal(evaluate(after, env) + 0 * vx, want), (before, after, vi)
    assert folded > 1000


def test_two_quotients_whose_dividends_differ_by_a_constant_are_bounded_together():
    # blocks of 49 that 64 consecutive values meet: 2 or 3, whatever t is (each quotient alone
    # spans [0, 64] over t in [0, 48], which bounded their difference by 65)
    t = Var("t")
    blocks = (t * 64 + 63) // 49 - (t * 64) // 49 + 1
    assert const_bounds(blocks, {t: Interval.from_range(0, 49)}) == (2, 3)
    assert const_bounds(blocks) == (2, 3)  # for every t, negative ones too
    for d, c in itertools.product(range(-12, 13), range(1, 7)):
        diff = (x + d) // c - x // c
        lo, hi = const_bounds(diff)
        values = [(v + d) // c - v // c for v in range(-20, 21)]
        assert (lo, hi) == (min(values), max(values)), (d, c)
