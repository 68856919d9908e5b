"""Quotients by a constant: the interval analyzer bounds two whose dividends differ by a
constant together; checked against every value on small divisors and differences."""

import itertools

from tensorforge.ir.arith import Interval, const_bounds
from tensorforge.te.expr import Var

x, y = Var("x"), Var("y")


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
