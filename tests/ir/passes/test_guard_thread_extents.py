"""guard_thread_extents: sibling thread loops take their tag's launch extent, guarded if smaller."""

import dataclasses

from tensorforge.ir.passes.guard_thread_extents import guard_thread_extents, launch_extents
from tensorforge.ir.stmt import IfThenElse, KernelLaunch, LetStmt, Seq, Sync, ThreadAllReduce
from tensorforge.te.expr import LT, Add, And, Select, Var
from tests.ir.builders import bind, buf, c, f32, load, store, sum_reducer

A, B = buf("A", 256), buf("B", 256)
S = buf("S", 128, scope="shared")
RED = buf("red", 1, scope="local")


def test_smaller_sibling_is_widened_and_guarded():
    t1, t2 = Var("t1"), Var("t2")
    first = bind(t1, 128, "threadIdx.x", store(S, t1, load(A, t1)))
    second = bind(t2, 64, "threadIdx.x", store(B, t2, load(S, t2)))
    expected = Seq((first, bind(t2, 128, "threadIdx.x", IfThenElse(LT(t2, c(64)), second.body))))
    assert guard_thread_extents(Seq((first, second))) == expected


def test_loops_at_the_launch_extent_and_other_tags_are_unchanged():
    t1, t2, b = Var("t1"), Var("t2"), Var("b")
    body = Seq(
        (
            bind(t1, 128, "threadIdx.x", store(B, t1, f32(1))),
            bind(t2, 128, "threadIdx.x", store(B, t2, f32(2))),
            bind(b, 7, "blockIdx.x", store(B, b, f32(3))),
        )
    )
    assert guard_thread_extents(body) is body
    assert launch_extents(body) == {"threadIdx.x": 128, "blockIdx.x": 7}


def test_nonzero_min_guards_against_min_plus_extent():
    t1, t2 = Var("t1"), Var("t2")
    small = bind(t2, 5, "threadIdx.x", store(B, t2, f32(1)), low=3)
    out = guard_thread_extents(Seq((bind(t1, 8, "threadIdx.x", store(B, t1, f32(0))), small)))
    assert out.stmts[1].extent == c(8)
    assert out.stmts[1].body == IfThenElse(LT(t2, Add(c(3), c(5))), small.body)


def test_barrier_stays_outside_the_guard_and_allreduce_gets_the_condition():
    t1, k = Var("t1"), Var("k")
    reduce = ThreadAllReduce(sum_reducer(), (load(S, k),), (RED,), "threadIdx.x", 100)
    tail = store(B, c(0), load(RED, c(0)))
    body = Seq(
        (
            bind(t1, 128, "threadIdx.x", store(S, t1, load(A, t1))),
            bind(k, 100, "threadIdx.x", Seq((Sync(), reduce, tail))),
        )
    )
    guarded = guard_thread_extents(body).stmts[1]
    cond = LT(k, c(100))
    assert guarded.extent == c(128)
    assert guarded.body == Seq(
        (Sync(), dataclasses.replace(reduce, condition=cond), IfThenElse(cond, tail))
    )


def test_nested_guards_combine_on_the_allreduce():
    tx, ty, tx2, ty2 = Var("tx"), Var("ty"), Var("tx2"), Var("ty2")
    reduce = ThreadAllReduce(sum_reducer(), (load(S, tx2),), (RED,), "threadIdx.x", 16)
    body = Seq(
        (
            bind(ty, 8, "threadIdx.y", bind(tx, 32, "threadIdx.x", store(S, tx, f32(1)))),
            bind(ty2, 4, "threadIdx.y", bind(tx2, 16, "threadIdx.x", reduce)),
        )
    )
    inner = guard_thread_extents(body).stmts[1].body.body
    assert inner.condition == And(LT(tx2, c(16)), LT(ty2, c(4)))


def test_let_over_a_barrier_loads_only_under_the_guard():
    t1, t2, v = Var("t1"), Var("t2"), Var("v", "float32")
    let = LetStmt(v, load(A, t2), Seq((Sync(), store(B, t2, v))))
    out = guard_thread_extents(
        Seq((bind(t1, 64, "threadIdx.x", store(B, t1, f32(0))), bind(t2, 32, "threadIdx.x", let)))
    )
    cond = LT(t2, c(32))
    assert out.stmts[1].body == LetStmt(
        v, Select(cond, load(A, t2), f32(0)), Seq((Sync(), IfThenElse(cond, store(B, t2, v))))
    )


def test_each_kernel_has_its_own_launch():
    t1, t2 = Var("t1"), Var("t2")
    first = KernelLaunch("k0", bind(t1, 128, "threadIdx.x", store(B, t1, f32(0))))
    second = KernelLaunch("k1", bind(t2, 64, "threadIdx.x", store(B, t2, f32(1))))
    body = Seq((first, second))
    assert guard_thread_extents(body) == body
