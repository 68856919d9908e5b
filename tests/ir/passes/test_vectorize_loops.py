"""vectorize_loops: a VECTORIZED loop of constant extent becomes Ramp / Broadcast vector code."""

from tensorforge.ir.expr import Broadcast, BufferLoad, Ramp
from tensorforge.ir.passes.vectorize_loops import vectorize_loops
from tensorforge.ir.stmt import Allocate, BufferStore, For, IfThenElse, LoopKind
from tensorforge.te.expr import LT, Add, Cast, Mul, Var
from tests.ir.builders import buf, c, f32, load, loop, store

A, C = buf("A", 64), buf("C", 64)
VEC = LoopKind.VECTORIZED


def ramp(base, lanes=4):
    return Ramp(Add(base, c(0)), c(1), lanes)  # the loop's min (0) added to its base


def test_contiguous_body_becomes_vector_store_of_vector_load():
    i, v, x = Var("i"), Var("v"), Var("x", "float32")
    before = loop(v, 4, store(C, i * 4 + v, load(A, i * 4 + v) * x), kind=VEC)
    index = ramp(Mul(i, c(4)))
    expected = BufferStore(C, (index,), BufferLoad(A, (index,)) * Broadcast(x, 4))
    assert vectorize_loops(before) == expected


def test_lane_dependent_guard_becomes_store_and_load_predicates():
    i, v = Var("i"), Var("v")
    before = loop(
        v, 4, IfThenElse(i * 4 + v < 10, store(C, i * 4 + v, load(A, i * 4 + v))), kind=VEC
    )
    index = ramp(Mul(i, c(4)))
    mask = LT(index, Broadcast(c(10), 4))
    expected = BufferStore(C, (index,), BufferLoad(A, (index,), mask), mask)
    assert vectorize_loops(before) == expected


def test_inner_loop_stays_a_loop_with_a_vector_body():
    v, j = Var("v"), Var("j")
    before = loop(v, 4, loop(j, 3, store(C, j * 4 + v, load(C, j * 4 + v) + f32(1.0))), kind=VEC)
    index = ramp(Mul(j, c(4)))
    body = BufferStore(C, (index,), BufferLoad(C, (index,)) + Broadcast(f32(1.0), 4))
    assert vectorize_loops(before) == For(j, c(0), c(3), body)


def test_single_lane_loop_is_its_body_at_the_minimum():
    i, v = Var("i"), Var("v")
    before = loop(v, 1, store(C, i + v, f32(2.0)), kind=VEC, low=5)
    assert vectorize_loops(before) == store(C, i + c(5), f32(2.0))


def test_lane_invariant_store_keeps_the_vectorized_loop():
    i, v = Var("i"), Var("v")
    before = loop(v, 4, store(C, i, load(A, v)), kind=VEC)  # every lane writes C[i]
    assert vectorize_loops(before) is before


def test_allocation_per_lane_keeps_the_loop():
    v = Var("v")
    T = buf("T", 1, scope="local")
    before = loop(v, 4, Allocate(T, c(1), store(T, c(0), load(A, v))), kind=VEC)
    out = vectorize_loops(before)
    assert isinstance(out, For) and out.kind is VEC


def test_symbolic_extent_and_serial_loops_are_left_alone():
    v, n = Var("v"), Var("n")
    symbolic = For(v, c(0), n, store(C, v, f32(0.0)), VEC)
    serial = loop(v, 4, store(C, v, f32(0.0)))
    assert vectorize_loops(symbolic) is symbolic
    assert vectorize_loops(serial) is serial


def test_a_widened_lane_index_stays_a_ramp():
    # a store at a run-time row offset: int64(i) * int64(n) + int64(v), v the lane: a vector
    # store at a ramp of int64 addresses, not a scalar loop of 4 stores
    i, v, n = Var("i"), Var("v"), Var("n")
    wide = lambda e: Cast("int64", e)  # noqa: E731
    before = loop(v, 4, store(C, wide(i) * wide(n) + wide(v), load(A, v)), kind=VEC)
    out = vectorize_loops(before)
    assert isinstance(out, BufferStore)
    (index,) = out.indices
    assert isinstance(index, Ramp) and index.dtype == "int64x4"
