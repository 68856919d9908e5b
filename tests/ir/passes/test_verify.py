"""The IR verifier: hand-built good and bad loop IR, and the pipeline catching a bad bound inference."""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp
from tensorforge.ir.passes.verify import verify, verify_func
from tensorforge.ir.stmt import (
    Allocate,
    BufferStore,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Realize,
    seq,
)
from tensorforge.te.expr import GE, LT, Add, Cast, Const, FloorMod, Select, Var, const


def buf(name, *shape, dtype="float32"):
    return Buffer(name, tuple(const(d) if isinstance(d, int) else d for d in shape), dtype)


def loop(var, extent, body, lo=0):
    return For(var, const(lo), const(extent) if isinstance(extent, int) else extent, body)


def load(b, index, pred=None):
    return BufferLoad(b, (index,), pred)


def store(b, index, value, pred=None):
    return BufferStore(b, (index,), value, pred)


def func(body, *params):
    return PrimFunc("main", tuple(params), body)


A, B = buf("A", 10), buf("B", 10)
i = Var("i")


def raises(stmt_or_func, match, after="my_pass"):
    with pytest.raises(tf.LoweringError, match=match) as info:
        if isinstance(stmt_or_func, PrimFunc):
            verify_func(stmt_or_func, after=after)
        else:
            verify(stmt_or_func, after=after)
    assert after in str(info.value)  # the message names the pass that produced the IR
    return info.value


# -- good IR ---------------------------------------------------------------------------------------


def test_good_loop_passes_unchanged():
    body = loop(i, 10, store(B, i, load(A, i) * 2.0))
    assert verify(body) is body
    f = func(body, A, B)
    assert verify_func(f) is f


def test_guarded_shifted_store_passes():
    body = loop(i, 10, IfThenElse(LT(i + 1, const(10)), store(B, i + 1, load(A, i))))
    verify_func(func(body, A, B))


def test_else_branch_uses_the_negated_guard():
    body = loop(
        i, 10, IfThenElse(LT(i, const(1)), store(B, i, const(0.0)), store(B, i, load(A, i - 1)))
    )
    verify_func(func(body, A, B))


def test_select_condition_guards_its_loads():
    body = loop(i, 10, store(B, i, Select(GE(i, const(1)), load(A, i - 1), const(0.0))))
    verify_func(func(body, A, B))


def test_predicated_vector_tail_passes():
    # for io in range(2): B[ramp(io*8, 1, 8)] = A[...] where lanes < 10
    io = Var("io")
    index = Ramp(io * 8, const(1), 8)
    mask = LT(index, Broadcast(const(10), 8))
    body = loop(io, 2, store(B, index, load(A, index, mask), mask))
    verify_func(func(body, A, B))


def test_tiled_2d_guards_combine():
    # C is 10 x 7, flattened; rows tiled by 4 with a guard on the row only
    C = buf("C", 10, 7)
    io, ii, j = Var("io"), Var("ii"), Var("j")
    row = io * 4 + ii
    body = loop(
        io,
        3,
        loop(ii, 4, loop(j, 7, IfThenElse(LT(row, const(10)), store(C, row * 7 + j, const(1.0))))),
    )
    verify_func(func(body, C))


def test_let_value_gives_the_range():
    x = Var("x")
    body = loop(i, 9, LetStmt(x, i + 1, store(B, x, load(A, i))))
    verify_func(func(body, A, B))


def test_symbolic_size_proven_and_unprovable_both_pass():
    n, m = Var("n"), Var("m")
    An = Buffer("A", (n,), "float32")
    # i < n: provably inside A; i < m: unknown either way, so no error
    verify_func(func(loop(i, n, store(An, i, const(0.0))), An, n))
    verify_func(func(loop(i, m, store(An, i, const(0.0))), An, n, m))


def test_scalar_parameter_is_defined():
    alpha = Var("alpha", "float32")
    verify_func(func(loop(i, 10, store(B, i, load(A, i) * alpha)), A, B, alpha))


def test_allocation_in_bounds():
    T = buf("T", 4)
    body = Allocate(
        T,
        const(4),
        seq(loop(i, 4, store(T, i, const(0.0))), loop(i, 4, store(B, i, load(T, 3 - i)))),
    )
    verify_func(func(body, B))


def test_allocation_shape_is_not_checked_only_its_extent():
    # passes may leave a loop var in an allocation's (unused) shape after substituting the loop
    io = Var("io")
    T = Buffer("T", (io * 2 + 2,), "float32")
    verify_func(func(Allocate(T, const(2), store(T, const(1), const(0.0))), B))


def test_nd_access_against_realized_region_before_flattening():
    T = buf("T", 4)
    io, ii = Var("io"), Var("ii")
    region = Realize(
        T, (io * 4,), (const(4),), loop(ii, 4, BufferStore(T, (io * 4 + ii,), const(0.0)))
    )
    verify_func(func(loop(io, 2, region), B), final=False)


# -- bad IR ----------------------------------------------------------------------------------------


def test_constant_index_out_of_bounds():
    raises(store(B, const(10), const(1.0)), r"store to 'B' is out of bounds: index 10 .*\[0, 9\]")


def test_shifted_loop_index_out_of_bounds():
    raises(
        loop(i, 10, store(B, i + 1, load(A, i))),
        r"store to 'B' is out of bounds: index i \+ 1 reaches 1",
    )


def test_negative_index_out_of_bounds():
    raises(
        func(loop(i, 10, store(B, i, load(A, i - 1))), A, B),
        r"load from 'A' is out of bounds.*below",
    )


def test_allocation_overrun():
    T = buf("T", 4)
    raises(
        Allocate(T, const(4), loop(i, 5, store(T, i, const(0.0)))), r"store to 'T' is out of bounds"
    )


def test_vector_store_past_the_end():
    io = Var("io")
    body = loop(io, 2, store(B, Ramp(io * 8, const(1), 8), Broadcast(const(0.0), 8)))
    raises(body, r"store to 'B' is out of bounds: index ramp")


def test_realized_region_overrun_before_flattening():
    T = buf("T", 4)
    io, ii = Var("io"), Var("ii")
    region = Realize(
        T, (io * 4,), (const(4),), loop(ii, 5, BufferStore(T, (io * 4 + ii,), const(0.0)))
    )
    with pytest.raises(tf.LoweringError, match="store to 'T' is out of bounds"):
        verify_func(func(loop(io, 2, region), B), after="schedule_to_func", final=False)


def test_undefined_variable():
    j = Var("j")
    raises(
        func(loop(i, 10, store(B, j, const(0.0))), B),
        r"variable 'j' is used but is neither a parameter",
    )


def test_variable_used_outside_its_loop():
    raises(
        seq(loop(i, 10, store(B, i, const(0.0))), store(B, i, const(1.0))),
        r"variable 'i' is used outside the loop",
    )


def test_buffer_not_allocated():
    T = buf("T", 4)
    raises(
        func(loop(i, 4, store(B, i, load(T, i))), B),
        r"buffer 'T' is accessed but is neither a parameter nor allocated",
    )


def test_buffer_used_outside_its_allocation():
    T = buf("T", 4)
    body = seq(
        Allocate(T, const(4), store(T, const(0), const(0.0))), store(B, const(0), load(T, const(0)))
    )
    raises(body, r"buffer 'T' is accessed but is neither a parameter nor allocated")


def test_mismatched_lanes_in_binary_op():
    index = Ramp(const(0), const(1), 8)
    bad = Add(load(A, Ramp(const(0), const(1), 8)), load(A, Ramp(const(0), const(1), 4)))
    raises(store(B, index, bad), r"operands of Add have float32x8 and float32x4 lanes")


def test_integer_operands_of_two_widths():
    # an int32 index beside an int64 extent: which width the operation means is for lowering to
    # say, not for each backend to guess (LLVM refused it, C would widen it)
    i, m = Var("i"), Var("m", "int64")
    good = loop(i, 8, store(B, FloorMod(Cast("int64", i), m), load(A, i)))
    assert verify(good) == good
    bad = loop(i, 8, store(B, FloorMod(i, m), load(A, i)))
    raises(bad, r"operands of FloorMod are int32 and int64: i % m")


def test_loop_bounds_of_another_type_than_the_variable():
    i = Var("i", "int64")
    bad = For(i, const(0), Const(8, "int64"), store(B, const(0), load(A, const(0))))
    raises(bad, r"loop 'i' \(int64\) has min 0 \(int32\)")


def test_store_value_lanes_must_match_index():
    raises(
        store(B, Ramp(const(0), const(1), 4), load(A, Ramp(const(0), const(1), 8))),
        r"store to 'B' writes a float32x8 value at a 4-lane index",
    )


def test_predicate_lanes_must_match_index():
    index = Ramp(const(0), const(1), 4)
    raises(
        store(B, index, load(A, index), Broadcast(Const(True, "bool"), 8)),
        r"predicate boolx8 does not match",
    )


def test_realize_left_in_final_ir():
    T = buf("T", 4)
    raises(
        Realize(T, (const(0),), (const(4),), store(T, const(0), const(0.0))),
        r"a Realize of 'T' survived",
    )


def test_unflattened_access_in_final_ir():
    C = buf("C", 3, 3)
    raises(BufferStore(C, (const(0), const(0)), const(0.0)), r"access to 'C' was not flattened")


# -- through the pipeline --------------------------------------------------------------------------


def test_pipeline_catches_shrunk_compute_at_region(monkeypatch):
    from tensorforge.schedule import bounds
    from tests.schedule.faults import shrunk_needed_region

    monkeypatch.setattr(bounds, "_needed_region", shrunk_needed_region)
    A_ = te.placeholder((38,), name="A")
    B_ = te.compute((38,), lambda i: A_[i] * 2.0, name="B")
    C_ = te.compute((37,), lambda i: B_[i] + B_[i + 1], name="C")
    s = te.create_schedule(C_.op)
    xo, xi = s[C_].split(C_.op.axis[0], factor=8)
    s[B_].compute_at(s[C_], xo)
    with pytest.raises(
        tf.LoweringError, match=r"load from 'B' is out of bounds: index i.inner \+ 1"
    ):
        tf.lower(s, [A_, C_])


def test_pipeline_accepts_the_same_schedule_unbroken():
    A_ = te.placeholder((38,), name="A")
    B_ = te.compute((38,), lambda i: A_[i] * 2.0, name="B")
    C_ = te.compute((37,), lambda i: B_[i] + B_[i + 1], name="C")
    s = te.create_schedule(C_.op)
    xo, xi = s[C_].split(C_.op.axis[0], factor=8)
    s[B_].compute_at(s[C_], xo)
    s[C_].vectorize(xi)
    verify_func(tf.lower(s, [A_, C_]), after="the pipeline")


def test_unrolled_loop_kind_is_irrelevant():
    body = For(i, const(0), const(10), store(B, i, load(A, i)), LoopKind.UNROLLED)
    verify_func(func(body, A, B))
