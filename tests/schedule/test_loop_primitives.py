"""split / tile / fuse / reorder / unroll / vectorize / parallel, each against numpy."""

import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.testing import check_against_numpy

TAILS = ["auto", "guard", "peel"]


def vector_add(n):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_schedule(C.op), A, B, C


def add_2d(n, m):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return te.create_schedule(B.op), A, B


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("n,factor", [(1000, 32), (7, 3), (64, 8), (5, 8), (1, 4)])
def test_split_factor(n, factor, tail):
    s, A, B, C = vector_add(n)
    s[C].split(C.op.axis[0], factor=factor, tail=tail)
    check_against_numpy(s, [A, B], [C], lambda a, b: a + b)


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("n,nparts", [(1000, 7), (10, 3), (16, 4)])
def test_split_nparts(n, nparts, tail):
    s, A, B, C = vector_add(n)
    s[C].split(C.op.axis[0], nparts=nparts, tail=tail)
    check_against_numpy(s, [A, B], [C], lambda a, b: a + b)


@pytest.mark.parametrize("tail", TAILS)
def test_tile_33x17(tail, cpu_target):
    s, A, B = add_2d(33, 17)
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], 8, 5, tail=tail)
    assert s[B].leaf_iter_vars == [xo, yo, xi, yi]
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1, target=cpu_target)


@pytest.mark.parametrize("tail", TAILS)
def test_split_of_split(tail, cpu_target):
    s, A, B, C = vector_add(1000)
    o, i = s[C].split(C.op.axis[0], factor=32, tail=tail)
    io, ii = s[C].split(i, factor=3, tail=tail)
    oo, oi = s[C].split(o, nparts=5, tail=tail)
    assert s[C].leaf_iter_vars == [oo, oi, io, ii]
    check_against_numpy(s, [A, B], [C], lambda a, b: a + b, target=cpu_target)


def test_fuse_then_split(cpu_target):
    s, A, B = add_2d(33, 17)
    f = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(f, factor=16)
    s[B].vectorize(fi)
    s[B].parallel(fo)
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1, target=cpu_target)


def test_reorder_and_unroll(cpu_target):
    s, A, B = add_2d(12, 10)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=4)
    s[B].reorder(jo, i, ji)
    s[B].unroll(ji)
    assert s[B].leaf_iter_vars == [jo, i, ji]
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1, target=cpu_target)


@pytest.mark.parametrize("tail", TAILS)
def test_vectorize_tail(tail, cpu_target):
    s, A, B, C = vector_add(1003)
    o, i = s[C].split(C.op.axis[0], factor=16, tail=tail)
    s[C].vectorize(i)
    s[C].parallel(o)
    check_against_numpy(s, [A, B], [C], lambda a, b: a + b, target=cpu_target)


def test_parallel_matmul_vectorized(cpu_target):
    n, m, l = 67, 45, 31
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    s[C].parallel(i)
    check_against_numpy(s, [A, B], [C], lambda a, b: a @ b, rtol=1e-4, atol=1e-4, target=cpu_target)


def test_pragma_auto_unroll(cpu_target):
    s, A, B = add_2d(8, 6)
    s[B].pragma(B.op.axis[0], "auto_unroll_max_step", 64)
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1, target=cpu_target)


def test_vectorize_past_the_lane_limit_is_refused_at_the_primitive():
    from tensorforge.schedule.stage import MAX_VECTOR_LANES

    A = te.placeholder((2**20,), name="A")
    B = te.compute(A.shape, lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(
        tf.ScheduleError,
        match=rf"vectorize: axis 'i' of stage 'B' has 1048576 lanes; at most {MAX_VECTOR_LANES}",
    ):
        s[B].vectorize(B.op.axis[0])
    _, wide = s[B].split(B.op.axis[0], factor=MAX_VECTOR_LANES + 1)
    with pytest.raises(tf.ScheduleError, match=r"has 1025 lanes"):
        s[B].vectorize(wide)


def test_vectorize_at_the_lane_limit_is_accepted():
    A = te.placeholder((3, 1024), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 3.0, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[1])
    check_against_numpy(s, [A], [B], lambda a: a * 3.0)


def test_vectorize_of_an_attached_stage_past_the_lane_limit_is_refused_at_lowering():
    A = te.placeholder((4, 2000), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute(A.shape, lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])  # B's region: one row of 2000
    s[B].vectorize(B.op.axis[1])
    with pytest.raises(tf.ScheduleError, match=r"axis 'j' of stage 'B' has 2000 lanes"):
        tf.lower(s, [A, C])
