"""guard_select_loads: a load in an arm of a select is predicated on that arm being taken."""

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.passes.guard_select_loads import guard_select_loads
from tensorforge.te.expr import GE, LT, And, Not, Select, Var
from tensorforge.te.visit import walk
from tests.ir.builders import buf, c, f32, load, store

A, B, C = buf("A", 64), buf("B", 64), buf("C", 64)


def test_padding_read_is_guarded_by_the_condition():
    i = Var("i")
    cond = GE(i, c(1))
    before = store(C, i, Select(cond, load(A, i - 1), f32(0.0)))
    expected = store(C, i, Select(cond, BufferLoad(A, (i - 1,), cond), f32(0.0)))
    assert guard_select_loads(before) == expected


def test_false_arm_loads_under_the_negation_and_predicates_combine():
    i, m = Var("i"), Var("m", "bool")
    cond = LT(i, c(32))
    before = store(C, i, Select(cond, load(A, i) * 2.0, load(B, i - 32, predicate=m)))
    expected = store(
        C,
        i,
        Select(cond, BufferLoad(A, (i,), cond) * 2.0, BufferLoad(B, (i - 32,), And(m, Not(cond)))),
    )
    assert guard_select_loads(before) == expected


def test_nested_selects_guard_with_every_enclosing_condition():
    i = Var("i")
    outer, inner = GE(i, c(1)), LT(i, c(63))
    before = store(C, i, Select(outer, Select(inner, load(A, i), f32(1.0)), f32(0.0)))
    inner_load = BufferLoad(A, (i,), And(inner, outer))
    expected = store(C, i, Select(outer, Select(inner, inner_load, f32(1.0)), f32(0.0)))
    assert guard_select_loads(before) == expected


def test_select_without_loads_and_loads_outside_selects_are_unchanged():
    i = Var("i")
    before = store(C, i, Select(LT(i, c(3)), f32(1.0), f32(2.0)) + load(A, i))
    assert guard_select_loads(before) is before


def test_an_element_the_condition_reads_is_read_unguarded_in_the_arms():
    # where(x > 0, x * x, -x): the condition reads A[i] whichever arm is taken
    i = Var("i")
    x = load(A, i)
    cond = GE(x, f32(0.0))
    before = store(C, i, Select(cond, x * x + load(B, i), f32(0.0) - x))
    expected = store(C, i, Select(cond, x * x + BufferLoad(B, (i,), cond), f32(0.0) - x))
    assert guard_select_loads(before) == expected


def test_nested_selects_on_a_value_stay_linear_in_size():
    # each level's condition reads the value the arms read: no predicate copies it (a graph of
    # such selects under dynamic shapes lowered to 2.3 M characters of IR)
    i = Var("i")
    value = load(A, i)
    for level in range(7):
        value = Select(GE(value, f32(float(level))), value * 2.0, f32(1.0) - value)
    after = guard_select_loads(store(C, i, value))
    assert not any(isinstance(n, BufferLoad) and n.predicate is not None for n in walk(after))


def test_a_load_inside_an_arm_of_the_condition_is_not_taken_as_unconditional():
    i = Var("i")
    inner = Select(LT(i, c(5)), load(A, i + 1), f32(0.0))  # A[i + 1] read only where i < 5
    cond = GE(inner, f32(0.0))
    after = guard_select_loads(store(C, i, Select(cond, load(A, i + 1), f32(0.0))))
    loads = [n for n in walk(after.value.true_value) if isinstance(n, BufferLoad)]
    assert loads and all(n.predicate is not None for n in loads)
