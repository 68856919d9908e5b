"""Loop building (schedule/loops.py) and the relation semantics it walks (schedule/relations.py).

The loop nests are read from `schedule_to_func`, the IR before any pass, so each test sees
what the builder itself emitted: peeled tails, guards, init nests, attachment points, reused
thread indices, cross-thread reductions.
"""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.stmt import For, IfThenElse, LetStmt, LoopKind, Realize, ThreadAllReduce
from tensorforge.schedule.relations import Fuse, Split
from tensorforge.schedule.to_ir import schedule_to_func
from tensorforge.te.expr import Var, const
from tensorforge.te.tensor import IterVar
from tensorforge.te.visit import walk


def nodes(func, kind):
    return [n for n in walk(func.body) if isinstance(n, kind)]


def loops(func, name):
    return [n for n in nodes(func, For) if n.var.name == name]


def vector_add(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    return A, B


# -- relations ------------------------------------------------------------------------------------


def iv(name):
    return IterVar(Var(name), None)


def test_split_maps_extents_forward_and_values_backward():
    parent, outer, inner = iv("i"), iv("i.o"), iv("i.i")
    split = Split(parent, outer, inner, const(4), None)
    extents = {parent: const(10)}
    extents.update(split.derived_extents(extents))
    assert (extents[outer].value, extents[inner].value) == (3, 4)
    value = split.source_values({outer: const(2), inner: const(3)}, extents)[parent]
    assert simplify_expr(value).value == 11
    (guard,) = split.guards({parent: const(11)}, extents)
    assert simplify_expr(guard).value is False  # 11 is past the 10 values of i: guarded off
    tail = split.tail_of(outer, extents)
    assert (tail.inner, tail.full.value, tail.remainder.value) == (inner, 2, 2)
    assert split.tail_of(inner, extents) is None  # only the outer loop has a tail


def test_split_by_nparts_strides_by_the_parent_extent_here():
    parent, outer, inner = iv("i"), iv("i.o"), iv("i.i")
    split = Split(parent, outer, inner, None, const(3))
    extents = {parent: const(10)}
    extents.update(split.derived_extents(extents))
    assert (extents[outer].value, extents[inner].value) == (3, 4)
    assert split.tail_of(outer, extents) is None  # only factor splits peel
    assert split.depends_on_extent_of({parent}) and not split.depends_on_extent_of({inner})


@pytest.mark.parametrize("tail, extent, peels", [("guard", 10, False), ("auto", 12, False)])
def test_split_without_a_tail_loop(tail, extent, peels):
    parent, outer, inner = iv("i"), iv("i.o"), iv("i.i")
    split = Split(parent, outer, inner, const(4), None, tail)
    extents = {parent: const(extent)}
    extents.update(split.derived_extents(extents))
    assert (split.tail_of(outer, extents) is not None) == peels


def test_fuse_maps_extents_forward_and_values_backward():
    outer, inner, fused = iv("i"), iv("j"), iv("i.j")
    fuse = Fuse(outer, inner, fused)
    extents = {outer: const(3), inner: const(7)}
    extents.update(fuse.derived_extents(extents))
    assert extents[fused].value == 21
    values = fuse.source_values({fused: const(16)}, extents)
    assert (simplify_expr(values[outer]).value, simplify_expr(values[inner]).value) == (2, 2)
    assert fuse.guards(values, extents) == ()
    assert fuse.tail_of(fused, extents) is None
    assert fuse.depends_on_extent_of({inner}) and not fuse.depends_on_extent_of({outer})


# -- tails ------------------------------------------------------------------------------------------


def test_a_constant_tail_is_peeled_into_its_own_loop():
    A, B = vector_add(10)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    func = schedule_to_func(s, [A, B], "f")
    main, tail = loops(func, "i.outer")
    assert (main.extent.value, tail.min.value, tail.extent.value) == (2, 2, 1)
    assert [lp.extent.value for lp in loops(func, "i.inner")] == [4, 2]
    assert not nodes(func, IfThenElse)  # neither loop needs a guard


@pytest.mark.parametrize("tail", ["guard", "auto"])
def test_a_guarded_tail_keeps_one_loop(tail):
    n = te.var("n") if tail == "auto" else 10  # "auto" guards a symbolic extent
    A, B = vector_add(n)
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4, tail=tail)
    args = [A, B] if tail == "guard" else [A, B, n]
    func = schedule_to_func(s, args, "f")
    assert len(loops(func, "i.outer")) == 1
    (guard,) = nodes(func, IfThenElse)
    assert "i.outer * 4 + i.inner < " in str(guard.condition)


def test_a_bound_loop_is_guarded_not_peeled():
    A, B = vector_add(10)
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=4)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    func = schedule_to_func(s, [A, B], "f")
    assert len(loops(func, "i.outer")) == 1 and len(nodes(func, IfThenElse)) == 1


def test_an_inner_loop_moved_outside_its_outer_loop_is_guarded():
    A = te.placeholder((10, 6), name="A")
    B = te.compute((10, 6), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=4)
    s[B].reorder(ii, io)  # the inner loop now encloses the outer one: no tail loop possible
    func = schedule_to_func(s, [A, B], "f")
    assert len(loops(func, "i.outer")) == 1 and nodes(func, IfThenElse)


# -- reductions ------------------------------------------------------------------------------------


def row_sum(n=6, m=10):
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="B")
    return A, B


def test_the_init_nest_runs_just_before_the_first_reduction_loop():
    A, B = row_sum()
    s = te.create_schedule(B.op)
    func = schedule_to_func(s, [A, B], "f")
    (outer,) = loops(func, "i")
    body = outer.body.stmts
    assert str(body[0]).startswith("B[i] = 0.0") and body[1].var.name == "k"


def test_a_reduction_bound_to_threads_is_a_cross_thread_reduction():
    A, B = row_sum(6, 64)
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=16)
    s[B].bind(s[B].op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    func = schedule_to_func(s, [A, B], "f")
    (allreduce,) = nodes(func, ThreadAllReduce)
    assert (allreduce.thread_tag, allreduce.extent) == ("threadIdx.x", 16)
    assert loops(func, "k.outer")  # the serial part runs inside each thread


def test_two_reduction_axes_bound_to_threads_are_an_error():
    A = te.placeholder((4, 8, 8), name="A")
    k1 = te.reduce_axis((0, 8), name="k1")
    k2 = te.reduce_axis((0, 8), name="k2")
    B = te.compute((4,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2]), name="B")
    s = te.create_schedule(B.op)
    s[B].bind(k1, te.thread_axis("threadIdx.x"))
    s[B].bind(k2, te.thread_axis("threadIdx.y"))
    with pytest.raises(tf.ScheduleError, match=r"binds several reduction axes \(k1, k2\)"):
        schedule_to_func(s, [A, B], "f")


# -- attachments and threads ------------------------------------------------------------------------


def test_an_attached_stage_is_realized_at_the_top_of_its_loop():
    A = te.placeholder((12,), name="A")
    B = te.compute((12,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((12,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    func = schedule_to_func(s, [A, C], "f")
    (outer,) = loops(func, "i.outer")
    assert isinstance(outer.body, Realize) and outer.body.buffer.name == "B"
    producer, consumer = outer.body.body.stmts
    assert producer.var.name == "i" and consumer.var.name == "i.inner"


def cooperative_copy(cache_threads):
    """A shared cache filled inside a thread loop of 8 threads by `cache_threads` threads."""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    AS = s.cache_read(A, "shared", [B])
    bx, tx = s[B].split(B.op.axis[0], factor=8)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[AS].compute_at(s[B], tx)
    _, ax = s[AS].split(s[AS].op.axis[0], nparts=cache_threads)
    s[AS].bind(s[AS].leaf_iter_vars[0], te.thread_axis("threadIdx.x"))
    return s, A, B


def test_a_thread_index_bound_again_inside_its_loop_is_reused():
    s, A, B = cooperative_copy(8)
    func = schedule_to_func(s, [A, B], "f")
    (let,) = nodes(func, LetStmt)  # the cache's loop *is* the enclosing threadIdx.x
    assert let.value.name == "i.inner"
    bound = [lp for lp in nodes(func, For) if lp.kind is LoopKind.THREAD_BINDING]
    assert [lp.thread_tag for lp in bound] == ["blockIdx.x", "threadIdx.x"]


def test_fewer_threads_than_the_enclosing_loop_sit_out():
    s, A, B = cooperative_copy(4)
    func = schedule_to_func(s, [A, B], "f")
    (let,) = nodes(func, LetStmt)
    assert isinstance(let.body, IfThenElse) and "< 4" in str(let.body.condition)


def test_more_threads_than_the_enclosing_loop_launches_is_an_error():
    s, A, B = cooperative_copy(16)
    with pytest.raises(tf.ScheduleError, match=r"needs 16 threads along threadIdx.x"):
        schedule_to_func(s, [A, B], "f")


def test_vectorizing_a_symbolic_extent_is_an_error():
    n = te.var("n")
    A, B = vector_add(n)
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    with pytest.raises(tf.ScheduleError, match=r"non-constant extent n"):
        schedule_to_func(s, [A, B, n], "f")
