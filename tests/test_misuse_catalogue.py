"""Every user mistake gets a tensorforge error naming the user's objects."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te


def matmul(n=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


def chain():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((10,), lambda i: A[i] - 1.0, name="D")
    return A, B, C, D


# -- schedule ---------------------------------------------------------------------------------


def test_split_non_leaf():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    with pytest.raises(
        tf.ScheduleError, match=r"split: 'i' is not a leaf axis of stage 'C'.*i.outer"
    ):
        s[C].split(i, factor=2)


def test_split_axis_of_other_stage():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(tf.ScheduleError, match="belongs to another stage"):
        s[C].split(D.op.axis[0], factor=2)


def test_split_both_factor_and_nparts():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(ValueError, match="exactly one of factor= or nparts="):
        s[C].split(C.op.axis[0], factor=2, nparts=2)


def test_split_neither():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="'i' in stage 'C'"):
        s[C].split(C.op.axis[0])


def test_split_zero_factor():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="factor must be >= 1"):
        s[C].split(C.op.axis[0], factor=0)


def test_split_bad_tail():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="tail='pad'"):
        s[C].split(C.op.axis[0], factor=2, tail="pad")


def test_reorder_twice():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tf.ScheduleError, match="axis 'i' appears twice"):
        s[C].reorder(i, j, i)


def test_fuse_not_adjacent():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tf.ScheduleError, match="must be adjacent"):
        s[C].fuse(i, k)


def test_fuse_wrong_order():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tf.ScheduleError, match=r"fuse in stage 'C'.*\(j, i\)"):
        s[C].fuse(j, i)


def test_fuse_reduce_with_spatial():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    with pytest.raises(tf.ScheduleError, match="reduction axis with a spatial axis"):
        s[C].fuse(j, k)


def test_vectorize_reduction_axis():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="vectorize: 'k' of stage 'C' is a reduction axis"):
        s[C].vectorize(k)


def test_parallel_reduction_axis():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="parallel: 'k' of stage 'C'"):
        s[C].parallel(k)


def test_vectorize_symbolic_extent():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    with pytest.raises(tf.ScheduleError, match="axis 'i' of stage 'B' has non-constant extent"):
        tf.lower(s, [A, B])


def test_vectorize_then_parallel_same_axis():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    s[C].vectorize(C.op.axis[0])
    with pytest.raises(tf.ScheduleError, match="already vectorized"):
        s[C].parallel(C.op.axis[0])


def test_compute_at_non_consumer_lists_readers():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(tf.ScheduleError, match="'D' does not consume 'B'.*read by: C"):
        s[B].compute_at(s[D], D.op.axis[0])


def test_compute_at_axis_not_of_parent():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(
        tf.ScheduleError, match="not a leaf axis of stage 'C'; its leaf axes are: i"
    ):
        s[B].compute_at(s[C], D.op.axis[0])


def test_compute_at_axis_split_later():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    i = C.op.axis[0]
    s[B].compute_at(s[C], i)
    s[C].split(i, factor=2)
    with pytest.raises(tf.ScheduleError, match="no longer a leaf axis of 'C'"):
        tf.lower(s, [A, C])


def test_compute_at_self():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="cannot be computed at itself"):
        s[C].compute_at(s[C], C.op.axis[0])


def test_inline_output():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="'C' is an output"):
        s[C].compute_inline()


def test_inline_reduction():
    A, B, C, k = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(tf.ScheduleError, match="'C' is a reduction"):
        s[C].compute_inline()


def test_schedule_placeholder():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="'A' is a placeholder"):
        s[A].split(A.op.shape[0], factor=2)


def test_unknown_tensor_in_schedule():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="'D' is not part of this schedule"):
        s[D]


def test_bind_tag_twice():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    tx = te.thread_axis("threadIdx.x")
    s[C].bind(i, tx)
    with pytest.raises(tf.ScheduleError, match="'threadIdx.x' is already bound to axis 'i'"):
        s[C].bind(j, te.thread_axis("threadIdx.x"))


def test_bind_non_thread_axis():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="must be bound to a te.thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[1])


def test_set_scope_unknown():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="set_scope of 'B': unknown scope 'texture'"):
        s[B].set_scope("texture")


def test_unknown_pragma():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="unknown pragma 'fast'"):
        s[C].pragma(C.op.axis[0], "fast")


# -- lower / build ------------------------------------------------------------------------------


def test_lower_missing_placeholder():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="placeholder 'A'.*not in args"):
        tf.lower(s, [C])


def test_lower_missing_output():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match="output 'C' is not in args"):
        tf.lower(s, [A])


def test_lower_bad_arg():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"args\[1\] is 3"):
        tf.lower(s, [A, 3, C])


def test_unknown_target():
    with pytest.raises(tf.TargetError, match="unknown kind 'opencl'"):
        tf.Target("opencl")


# -- te -----------------------------------------------------------------------------------------


def test_index_with_wrong_rank():
    A = te.placeholder((3, 4), name="A")
    with pytest.raises(tf.ExprError, match="tensor 'A' has 2 dimensions but was indexed with 1"):
        A[0]


def test_float_index():
    A = te.placeholder((3,), name="A")
    B = te.placeholder((3,), name="B")
    with pytest.raises(tf.ExprError, match="index 0 of tensor 'A'"):
        A[B[0]]


def test_compute_arity_mismatch():
    with pytest.raises(
        tf.ExprError, match="compute 'X': fcompute takes 1 indices but the shape has 2"
    ):
        te.compute((2, 3), lambda i: i, name="X")


def test_unknown_dtype():
    with pytest.raises(tf.ExprError, match="unknown dtype 'float8'"):
        te.placeholder((2,), dtype="float8", name="P")


def test_sum_without_axis():
    A = te.placeholder((3,), name="A")
    with pytest.raises(tf.ExprError, match="sum: give the reduction axis"):
        te.sum(A[0])


def test_nested_reduction():
    A = te.placeholder((3, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    with pytest.raises(tf.ExprError, match="a reduction must be the whole body"):
        te.compute((3,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="R")


# -- call -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def add_module():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    return tf.build(s, [A, B])


def test_call_wrong_count(add_module):
    with pytest.raises(tf.ArgumentError, match="A, B"):
        add_module(np.zeros(8, "float32"))


def test_call_wrong_shape(add_module):
    with pytest.raises(tf.ArgumentError, match="'B'"):
        add_module(np.ones(8, "float32"), np.ones(9, "float32"))


def test_call_wrong_dtype(add_module):
    with pytest.raises(tf.ArgumentError, match="'A'.*float32"):
        add_module(np.ones(8, "float64"), np.ones(8, "float32"))


def test_call_non_contiguous(add_module):
    a = np.ones(16, "float32")[::2]
    with pytest.raises(tf.ArgumentError, match="'A'"):
        add_module(a, np.ones(8, "float32"))
