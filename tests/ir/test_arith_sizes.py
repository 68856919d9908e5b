"""The analyzer's facts about symbolic sizes: a size_var is at least its `min_value`, and a row
index taken from a fused loop over sizes (`int32(f // int64(n)) % m`) provably lies in its
row, through the quotient, remainder and narrowing cast it is made of."""

import itertools

from tensorforge import te
from tensorforge.ir.arith import Interval, prove, simplify_expr
from tensorforge.te.expr import GE, LT, Cast, Const, FloorDiv, FloorMod, Mul, SizeVar, Var
from tensorforge.te.substitute import substitute


def c(value, dtype="int32"):
    return Const(value, dtype)


def test_a_size_var_is_at_least_its_least_value():
    n = te.size_var("n", min_value=2)
    assert isinstance(n, SizeVar) and isinstance(n, Var)
    assert prove(GE(n, c(2))) and not prove(GE(n, c(3)))
    assert prove(GE(te.size_var("m"), c(0)))  # TVM's size_var: never negative
    assert not prove(GE(Var("v"), c(0)))  # a plain var: nothing known
    # a row of n >= 1 elements takes at least one step of 16
    rows = te.size_var("rows", min_value=1)
    assert prove(GE((rows + 15) // 16, c(1)))
    assert not prove(GE((Var("v") + 15) // 16, c(1)))


def fused_row(heads, n):
    """The loop var of `for f in range(int64(heads) * int64(n))` and its range."""
    f = Var("f", "int64")
    extent = Mul(Cast("int64", heads), Cast("int64", n))
    return f, {f: Interval.from_range(c(0, "int64"), extent)}


def test_the_row_indices_of_a_fused_loop_lie_in_their_rows():
    heads, n = te.size_var("heads", min_value=2), te.size_var("n", min_value=2)
    f, ranges = fused_row(heads, n)
    head = Cast("int32", FloorDiv(f, Cast("int64", n)))  # f // n: which (batch, head) row
    row = Cast("int32", FloorMod(f, Cast("int64", n)))
    assert prove(LT(FloorMod(head, heads), heads), ranges)  # x % y < y
    assert prove(LT(row, n), ranges)  # int32(f % int64(n)) < n
    assert prove(LT(FloorDiv(head, heads), c(1)), ranges)  # f < heads*n: f // n // heads < 1
    assert prove(LT(head, heads), ranges)
    # what does not hold stays unproven
    assert not prove(LT(head, heads - 1), ranges)  # the last head
    assert not prove(LT(row, n - 1), ranges)
    assert not prove(LT(FloorMod(head, heads + 1), heads), ranges)  # heads may be reached
    assert not prove(LT(FloorDiv(head, n), c(1)), ranges)  # n is not heads


def test_a_divisor_of_unknown_sign_proves_nothing():
    heads, n = Var("heads"), Var("n")  # plain vars: they may be 0 or negative
    f, ranges = fused_row(heads, n)
    head = Cast("int32", FloorDiv(f, Cast("int64", n)))
    assert not prove(LT(FloorMod(head, heads), heads), ranges)
    assert not prove(LT(FloorDiv(head, heads), c(1)), ranges)


def test_what_is_proven_holds_for_every_size():
    # brute force: every condition proven for sizes >= 1 holds at every (heads, n, f)
    heads, n = te.size_var("heads", min_value=1), te.size_var("n", min_value=1)
    f, ranges = fused_row(heads, n)
    head = Cast("int32", FloorDiv(f, Cast("int64", n)))
    row = Cast("int32", FloorMod(f, Cast("int64", n)))
    candidates = [
        LT(FloorMod(head, heads), heads),
        LT(FloorMod(head, n), heads),
        LT(FloorMod(row, heads), n),
        LT(FloorDiv(head, heads), c(1)),
        LT(FloorDiv(head, n), c(1)),
        LT(FloorDiv(row, n), c(1)),
        LT(FloorDiv(row, heads), c(1)),
        LT(head, heads),
        LT(head, n),
        LT(row, n),
        LT(row, heads),
        LT(FloorDiv(f, Cast("int64", n)), Cast("int64", heads)),
        LT(FloorDiv(f, Cast("int64", heads)), Cast("int64", n)),
    ]
    proven = [cond for cond in candidates if prove(cond, ranges)]
    assert len(proven) >= 6  # the true ones with a reason: heads, n and f's range
    for cond in proven:
        for h, m in itertools.product(range(1, 6), range(1, 6)):
            for value in range(h * m):
                at = {heads: c(h), n: c(m), f: c(value, "int64")}
                folded = simplify_expr(substitute(cond, at))
                assert isinstance(folded, Const) and folded.value, (cond, h, m, value)
