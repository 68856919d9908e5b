"""peel_vector_bounds: a loop whose first / last iterations alone clamp or mask vector lanes runs
those iterations as loops of their own, the middle one free of the clamps and masks."""

from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.ir.passes.peel_vector_bounds import peel_vector_bounds
from tensorforge.ir.stmt import BufferStore, For, Seq
from tensorforge.te import size_var
from tensorforge.te.expr import GE, LT, Max, Min, Var
from tests.ir.builders import buf, c

A, X = buf("A", 64), buf("X", 128)


def window_column(j, offset):
    """A[8j:8j+8] = X[max(ramp(16j + offset, 2, 8), 0)] if ramp(16j + offset, 2, 8) >= 0."""
    columns = Ramp(j * 16 + offset, c(2), 8)
    load = BufferLoad(X, (Max(columns, Broadcast(c(0), 8)),))
    return BufferStore(A, (Ramp(j * 8, c(1), 8),), load, GE(columns, Broadcast(c(0), 8)))


def test_the_first_iteration_is_peeled_and_the_rest_read_strided():
    j = Var("j")
    loop = For(j, c(0), c(7), window_column(j, -1))
    first, rest = peel_vector_bounds(loop).stmts
    assert isinstance(first, BufferStore)  # j = 0: a loop of one iteration, simplified away
    assert isinstance(rest, For) and (rest.min.value, rest.extent.value) == (1, 6)
    store = rest.body
    assert store.predicate is None  # every lane of the mask holds for j >= 1
    assert isinstance(store.value.indices[0], Ramp)  # the clamp went: a strided load
    assert first.predicate is not None  # j = 0 keeps its mask and clamp


def test_the_last_iteration_is_peeled_where_the_top_clamps():
    j = Var("j")
    columns = Ramp(j * 16, c(2), 8)
    load = BufferLoad(X, (Min(columns, Broadcast(c(111), 8)),))
    loop = For(j, c(0), c(8), BufferStore(A, (Ramp(j * 8, c(1), 8),), load))
    middle, last = peel_vector_bounds(loop).stmts
    assert (middle.min.value, middle.extent.value) == (0, 7)
    assert isinstance(middle.body.value.indices[0], Ramp)
    assert isinstance(last, BufferStore) and isinstance(last.value.indices[0], Min)  # to 126


def test_loops_with_nothing_to_peel_stay():
    j = Var("j")
    inside = For(j, c(1), c(6), window_column(j, -1))  # no iteration clamps
    everywhere = For(j, c(0), c(7), window_column(j, -200))  # every iteration clamps
    short = For(j, c(0), c(2), window_column(j, -1))  # too short to peel
    for loop in (inside, everywhere, short):
        out = peel_vector_bounds(loop)
        assert not isinstance(out, Seq)


def row_steps(n):
    """for k in range((n + 15) // 16): A[16k:16k+16] = X[16k:16k+16], lanes past n masked off."""
    k = Var("k")
    lanes = Ramp(k * 16, c(1), 16)
    inside = LT(lanes, Broadcast(n, 16))
    body = BufferStore(A, (lanes,), BufferLoad(X, (lanes,), inside), inside)
    return For(k, c(0), (n + 15) // 16, body)


def test_the_last_step_of_a_run_time_row_is_peeled():
    # a row of n elements, n known only at run time (n >= 1): every step but the last is
    # whole, unmasked; the last keeps its masks
    middle, last = peel_vector_bounds(row_steps(size_var("n", min_value=1))).stmts
    assert isinstance(middle, For) and middle.body.predicate is None
    assert middle.body.value.predicate is None
    assert isinstance(last, BufferStore) and last.predicate is not None


def test_a_row_that_may_be_empty_is_not_peeled():
    # a plain var may be 0: the loop then runs no step, and a peeled last step would run one
    out = peel_vector_bounds(row_steps(Var("n")))
    assert isinstance(out, For) and out.body.predicate is not None
