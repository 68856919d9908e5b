"""Reductions: several axes, where=, max/min, argmax via comm_reducer, multi-output, dynamic shapes."""

import numpy as np
import pytest

from tensorforge import te
from tensorforge.testing import check_against_numpy


def test_sum_two_axes_with_where(cpu_target):
    A = te.placeholder((20, 30, 40), name="A")
    r = te.reduce_axis((0, 30), name="r")
    c = te.reduce_axis((0, 40), name="c")
    B = te.compute((20,), lambda i: te.sum(A[i, r, c], axis=[r, c], where=r + c < 50), name="B")
    s = te.create_schedule(B.op)
    co, ci = s[B].split(c, factor=7)
    s[B].reorder(B.op.axis[0], co, r, ci)

    def ref(a):
        rr, cc = np.meshgrid(np.arange(30), np.arange(40), indexing="ij")
        return (a * ((rr + cc) < 50)).sum(axis=(1, 2))

    check_against_numpy(s, [A], [B], ref, rtol=1e-4, atol=1e-4, target=cpu_target)


@pytest.mark.parametrize("red,np_red", [(te.max, np.max), (te.min, np.min)])
def test_max_min(red, np_red, cpu_target):
    A = te.placeholder((17, 23), name="A")
    k = te.reduce_axis((0, 23), name="k")
    B = te.compute((17,), lambda i: red(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    check_against_numpy(s, [A], [B], lambda a: np_red(a, axis=1), target=cpu_target)


def test_int_sum_and_elementwise_max(cpu_target):
    A = te.placeholder((10, 9), dtype="int32", name="A")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((10,), lambda i: te.sum(te.max(A[i, k], 0), axis=k), name="B")
    s = te.create_schedule(B.op)
    check_against_numpy(s, [A], [B], lambda a: np.maximum(a, 0).sum(axis=1), target=cpu_target)


def test_argmax_comm_reducer(cpu_target):
    def fcombine(x, y):
        idx = te.if_then_else(x[1] >= y[1], x[0], y[0])
        val = te.if_then_else(x[1] >= y[1], x[1], y[1])
        return idx, val

    def fidentity(t0, t1):
        return te.const(-1, t0), te.const(-np.inf, t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    A = te.placeholder((12, 31), name="A")
    k = te.reduce_axis((0, 31), name="k")
    idx, val = te.compute((12,), lambda i: argmax((k, A[i, k]), axis=k), name="T")
    s = te.create_schedule(idx.op)
    ko, ki = s[idx].split(k, factor=4)
    check_against_numpy(
        s,
        [A],
        [idx, val],
        lambda a: (a.argmax(axis=1).astype("int32"), a.max(axis=1)),
        target=cpu_target,
    )


def test_multi_output_compute(cpu_target):
    A = te.placeholder((15, 8), name="A")
    P, Q = te.compute((15, 8), lambda i, j: (A[i, j] + 1.0, A[i, j] * A[i, j]), name="PQ")
    s = te.create_schedule(P.op)
    o, i = s[P].split(P.op.axis[1], factor=3)
    check_against_numpy(s, [A], [P, Q], lambda a: (a + 1, a * a), target=cpu_target)


def test_dynamic_shape_two_sizes(cpu_target):
    import tensorforge as tf

    n = te.var("n")
    m = te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 3.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].parallel(B.op.axis[0])
    mod = tf.build(s, [A, B], target=cpu_target)
    rng = np.random.default_rng(1)
    for shape in [(5, 17), (33, 64)]:
        a = rng.uniform(-1, 1, shape).astype("float32")
        b = np.full(shape, np.nan, dtype="float32")
        mod(a, b)
        np.testing.assert_allclose(b, a * 2 + 3, rtol=1e-6)


def test_scalar_argument(cpu_target):

    alpha = te.var("alpha", dtype="float32")
    A = te.placeholder((30,), name="A")
    B = te.compute((30,), lambda i: A[i] * alpha, name="B")
    s = te.create_schedule(B.op)
    check_against_numpy(
        s, [A], [B], lambda a, x: a * x, scalars=[alpha], scalar_values=[2.5], target=cpu_target
    )


def test_parameters_keep_the_order_of_args(cpu_target):
    import tensorforge as tf

    alpha = te.var("alpha", dtype="float32")
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * alpha, name="C")
    s = te.create_schedule(C.op)
    mod = tf.build(
        s, [A, alpha, C], target=cpu_target
    )  # the scalar sits between the buffers, as listed
    a = np.arange(5, dtype="float32")
    c = np.full(5, np.nan, dtype="float32")
    mod(a, 2.0, c)
    np.testing.assert_array_equal(c, a * 2)
