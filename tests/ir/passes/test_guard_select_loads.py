"""guard_select_loads: a load in an arm of a select is predicated on that arm being taken."""

from tensorforge.ir.expr import BufferLoad
from tensorforge.ir.passes.guard_select_loads import guard_select_loads
from tensorforge.te.expr import GE, LT, And, Not, Select, Var
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
