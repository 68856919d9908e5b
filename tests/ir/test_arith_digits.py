"""The simplifier folds the digits of a fused index (x // a % b, x % a, x // (a*b)) back: the
rules, and a randomized comparison of simplified and unsimplified digit sums on random values
(negative ones too: with floor division and modulo each rule is an identity for every x)."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensorforge.ir.arith import Interval, simplify_expr
from tensorforge.te.expr import Const, Var, const
from tests.ir.test_arith import evaluate, same

x, y = Var("x"), Var("y")


def test_digit_pairs_fold():
    assert same(simplify_expr((x // 8 % 4) * 8 + x % 8), x % 32)
    assert same(simplify_expr((x // 32) * 4 + x // 8 % 4), x // 8)
    assert simplify_expr((x // 8) * 8 + x % 8) is x
    assert same(simplify_expr(((x // 8 % 4) * 8 + x % 8) * 3 + 5), (x % 32) * 3 + 5)


def test_a_4d_flat_index_of_one_fused_variable_folds_back_to_it():
    # n, c, h, w of a fused loop over 2 x 256 x 56 x 56, flattened row-major again
    n, c = x // (256 * 3136), x // 3136 % 256
    h, w = x // 56 % 56, x % 56
    flat = ((n * 256 + c) * 56 + h) * 56 + w
    assert simplify_expr(flat) is x
    assert same(simplify_expr(((c * 56) + h) * 56 + w), x % (256 * 3136))  # batch dropped
    one_batch = {x: Interval.from_range(0, 256 * 3136)}
    assert simplify_expr((c * 56 + h) * 56 + w, one_batch) is x


def test_digits_that_do_not_pair_stay():
    # the wrong coefficient, or a different variable: not a digit pair
    assert "//" in str(simplify_expr((x // 8 % 4) * 4 + x % 8))
    assert "//" in str(simplify_expr((x // 8 % 4) * 8 + y % 8))
    assert "//" in str(simplify_expr((x // 32) * 2 + x // 8 % 4))


@st.composite
def digit_sums(draw):
    """A sum of some digits of x in a random mixed radix, each times its place value (or a
    perturbed one), times k, plus noise terms: (expr, [x values to try])."""
    radices = draw(st.lists(st.integers(1, 9), min_size=1, max_size=4))
    k = draw(st.integers(-3, 3).filter(lambda v: v != 0))
    terms, place = [], 1
    for radix in radices:
        digit = x // place % radix if place > 1 else x % radix
        weight = place * k + draw(st.sampled_from([0, 0, 0, 1, -1]))  # mostly a true digit
        if draw(st.integers(0, 4)):  # mostly present
            terms.append(digit * weight)
        place *= radix
    if draw(st.booleans()):
        terms.append((x // place) * (place * k))  # the top digit
    if draw(st.booleans()):
        terms.append(y * draw(st.integers(-5, 5)) + draw(st.integers(-9, 9)))
    order = draw(st.permutations(range(len(terms))))
    e = const(0)
    for i in order:
        e = e + terms[i]
    return e


@settings(max_examples=300, deadline=None)
@given(digit_sums(), st.integers(0, 2**31 - 1))
def test_simplified_digit_sums_keep_their_values(e, seed):
    simplified = simplify_expr(e)
    rng = random.Random(seed)
    for _ in range(40):
        env = {id(x): rng.randint(-100_000, 100_000), id(y): rng.randint(-50, 50)}
        assert evaluate(simplified, env) == evaluate(e, env), (e, simplified, env)


def test_place_values_that_overflow_the_dtype_are_left_alone():
    big = Const(1 << 20, "int32")
    e = (x // big % big) * big + x % big  # x % 2**40 does not fit int32
    assert "1099511627776" not in str(simplify_expr(e))
