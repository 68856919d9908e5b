"""Bound inference (schedule/bounds.py): the region each stage computes where it is attached.

Regions are read from `stage_bounds` (what lowering infers) and compared as text, the way a
reader checks them; the numeric tests elsewhere check that the code built from them is right.
"""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.schedule import bounds
from tensorforge.schedule.placement import infer_scopes
from tensorforge.schedule.to_ir import inline_bodies, stage_bounds


def region(s, tensor):
    info = stage_bounds(s)[id(s[tensor])]
    return [(str(info.mins[iv]), str(info.extents[iv])) for iv in s[tensor].op.axis]


def stencil(n=38):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n - 1,), lambda i: B[i] + B[i + 1], name="C")
    return A, B, C


def test_a_root_stage_computes_its_whole_domain():
    A, B, C = stencil()
    s = te.create_schedule(C.op)
    assert region(s, B) == [("0", "38")]
    assert region(s, C) == [("0", "37")]


def test_a_stage_at_a_tile_loop_computes_the_tile_plus_the_halo():
    A, B, C = stencil()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    assert region(s, B) == [("i.outer * 8", "9")]  # B[i] and B[i + 1] for 8 values of i


def test_a_stage_at_the_innermost_loop_computes_what_one_iteration_reads():
    A, B, C = stencil()
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xi)
    assert region(s, B) == [("i.outer * 8 + i.inner", "2")]


def test_a_2d_tile_region():
    A = te.placeholder((20, 30), name="A")
    B = te.compute((20, 30), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((19, 28), lambda i, j: B[i + 1, j] * B[i, j + 2], name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 7)
    s[B].compute_at(s[C], jo)
    assert region(s, B) == [("i.outer * 4", "5"), ("j.outer * 7", "9")]


def test_a_constant_region_is_cut_back_to_the_domain():
    # k in 5 guarded blocks of 256 ranges over 1280 values; only the 1030 of B's domain are read
    A = te.placeholder((1030,), name="A")
    B = te.compute((1030,), lambda i: A[i] * 2.0, name="B")
    k = te.reduce_axis((0, 1030), name="k")
    C = te.compute((1,), lambda i: te.sum(B[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(s[C].op.reduce_axis[0], factor=256, tail="guard")
    s[B].compute_at(s[C], s[C].op.axis[0])
    assert region(s, B) == [("0", "1030")]


def test_within_domain_cuts_a_constant_window():
    from tensorforge.te.expr import const

    iv = te.placeholder((10,), name="T")  # any tensor: we need an axis with domain [0, 10)
    axis = te.compute((10,), lambda i: iv[i], name="U").op.axis[0]
    lo, extent = bounds._within_domain(const(-2), const(15), axis)
    assert (lo.value, extent.value) == (0, 10)
    lo, extent = bounds._within_domain(const(3), const(4), axis)
    assert (lo.value, extent.value) == (3, 4)


def test_a_consumer_outside_the_parent_is_an_error():
    A = te.placeholder((16,), name="A")
    B = te.compute((16,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((16,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((16,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])  # D reads B too, but runs outside C
    with pytest.raises(tf.ScheduleError, match=r"'B' is computed inside 'C' .* read by 'D'"):
        stage_bounds(s)


def test_a_consumer_reading_from_an_outer_loop_is_an_error():
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + 1.0, name="B")
    D = te.compute((16, 16), lambda i, j: B[i, j] * 2.0, name="D")
    C = te.compute((16, 16), lambda i, j: D[i, j] + B[i, j], name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[D].compute_at(s[C], i)
    s[B].compute_at(s[C], j)  # D, at the outer loop i, reads B before B exists
    with pytest.raises(tf.ScheduleError, match=r"'D' reads it from the outer loop 'i'"):
        stage_bounds(s)


def gpu_cache(scope):
    """B computed inside a block and thread loop of C; which loops does its region cover?"""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], tx)
    if scope is not None:
        s[B].set_scope(scope)
    return s, B


@pytest.mark.parametrize(
    "scope, expected",
    [
        ("local", [("i.outer * 16 + i.inner", "1")]),  # per thread: every loop fixed
        ("shared", [("i.outer * 16", "16")]),  # per block: threadIdx relaxed
        ("global", [("0", "64")]),  # per grid: blockIdx relaxed too
        (None, [("i.outer * 16 + i.inner", "1")]),  # inferred: local inside a thread loop
    ],
)
def test_the_scope_decides_which_gpu_loops_a_region_covers(scope, expected):
    s, B = gpu_cache(scope)
    assert region(s, B) == expected


def test_fixed_loop_vars_follow_the_scope_given_not_the_schedule():
    s, B = gpu_cache(None)
    stage = s[B]
    by_scope = {
        scope: {v.name for v in bounds.enclosing_loop_vars(stage) if id(v) in fixed}
        for scope in ("local", "shared", "global")
        for fixed in [bounds.fixed_loop_vars(stage, scope)]
    }
    assert by_scope == {"local": {"i.outer", "i.inner"}, "shared": {"i.outer"}, "global": set()}


def test_infer_bounds_takes_scopes_as_a_map():
    s, B = gpu_cache(None)
    scopes = infer_scopes(s)
    assert scopes[id(s[B])] == "local" and s[B].scope == "global"  # the schedule is untouched
    scopes[id(s[B])] = "shared"
    info = bounds.infer_bounds(s, inline_bodies(s), scopes)[id(s[B])]
    assert str(info.extents[s[B].op.axis[0]]) == "16"


def test_guard_axes_only_where_a_read_could_leave_its_tensor():
    # B's tiles stick out of its domain in the last tile of a non-divisible split
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((30,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8, tail="guard")
    s[B].compute_at(s[C], xo)
    assert stage_bounds(s)[id(s[B])].guard_axes == {0}  # B would read A[30..31]
    # a producer reading nothing outside its tensor needs no guard
    P = te.compute((30,), lambda i: te.const(1.0, "float32") * i, name="P")
    Q = te.compute((30,), lambda i: P[i] * 2.0, name="Q")
    s = te.create_schedule(Q.op)
    xo, xi = s[Q].split(Q.op.axis[0], factor=8, tail="guard")
    s[P].compute_at(s[Q], xo)
    assert stage_bounds(s)[id(s[P])].guard_axes == set()


def test_bound_inference_does_not_write_the_schedule():
    s, B = gpu_cache(None)
    before = {id(st): (st.scope, st.attach_type, list(st.leaf_iter_vars)) for st in s.stages}
    stage_bounds(s)
    tf.lower(s, [s.stages[0].op.output(0), s.outputs[0].output(0)], target="cuda -arch=sm_90")
    after = {id(st): (st.scope, st.attach_type, list(st.leaf_iter_vars)) for st in s.stages}
    assert before == after
