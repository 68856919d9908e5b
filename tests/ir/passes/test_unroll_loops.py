"""unroll_loops: unrolled loops of constant extent become copies of their body."""

from tensorforge.ir.expr import Ramp
from tensorforge.ir.passes.unroll_loops import (
    MAX_UNROLL,
    PARTIAL_UNROLL,
    partial_unroll,
    unroll_loops,
)
from tensorforge.ir.stmt import For, LoopKind, Seq
from tensorforge.te.expr import Add, Mul, Var
from tests.ir.builders import buf, c, f32, load, loop, store

A = buf("A", 4096)
B = buf("B", 4096)


def test_unrolled_loop_becomes_copies_with_the_index_substituted():
    i = Var("i")
    out = unroll_loops(loop(i, 3, store(A, i, f32(1)), LoopKind.UNROLLED, low=2))
    assert out == Seq(tuple(store(A, c(k), f32(1)) for k in (2, 3, 4)))


def test_serial_and_symbolic_loops_stay():
    i, n = Var("i"), Var("n")
    serial = loop(i, 3, store(A, i, f32(1)))
    symbolic = For(i, c(0), n, store(A, i, f32(1)), LoopKind.UNROLLED)
    assert unroll_loops(serial) is serial and unroll_loops(symbolic) is symbolic


def test_nested_unrolled_loops_unroll_inside_a_serial_loop():
    i, j = Var("i"), Var("j")
    inner = loop(j, 2, store(A, Add(i, j), f32(0)), LoopKind.UNROLLED)
    out = unroll_loops(loop(i, 5, inner))
    assert out == loop(i, 5, Seq((store(A, Add(i, c(0)), f32(0)), store(A, Add(i, c(1)), f32(0)))))


def test_auto_unroll_pragma_unrolls_small_serial_loops_only():
    i, j = Var("i"), Var("j")
    small = For(i, c(0), c(2), store(A, i, f32(1)), pragmas=(("auto_unroll_max_step", 4),))
    assert unroll_loops(small) == Seq((store(A, c(0), f32(1)), store(A, c(1), f32(1))))
    big = For(j, c(0), c(9), store(A, j, f32(1)), pragmas=(("auto_unroll_max_step", 4),))
    assert unroll_loops(big) == big


def test_too_many_statements_stay_a_loop():
    i = Var("i")
    huge = loop(i, MAX_UNROLL + 1, store(A, c(0), f32(1)), LoopKind.UNROLLED)
    assert unroll_loops(huge) is huge


def test_a_gather_counts_a_copy_per_lane():
    # 40 copies of a 64-lane copy: a handful of nodes each when contiguous (unrolled); a
    # gather and a scatter (stride 40) are 64 accesses each, 40 x 128 > MAX_UNROLL (a loop)
    i = Var("i")

    def copy(stride):
        return store(A, Ramp(i, c(stride), 64), load(B, Ramp(Mul(i, c(64)), c(stride), 64)))

    assert isinstance(unroll_loops(loop(i, 40, copy(1), LoopKind.UNROLLED)), Seq)
    strided = loop(i, 40, copy(40), LoopKind.UNROLLED)
    assert unroll_loops(strided) is strided


def test_a_loop_left_alone_gets_a_bounded_count_only_if_innermost_and_small():
    i, j, n = Var("i"), Var("j"), Var("n")
    small = For(i, c(0), n, store(A, i, f32(1)), LoopKind.UNROLLED)
    assert partial_unroll(small) == PARTIAL_UNROLL
    # nested counts multiply (LLVM took seconds over 4 x 4 copies of an unrolled tile)
    outer = For(j, c(0), n, loop(i, 7, store(A, Add(i, j), f32(1))), LoopKind.UNROLLED)
    assert partial_unroll(outer) == 1
    big = Seq(tuple(store(A, c(k), f32(k)) for k in range(MAX_UNROLL // PARTIAL_UNROLL)))
    assert partial_unroll(For(i, c(0), n, big, LoopKind.UNROLLED)) == 1
