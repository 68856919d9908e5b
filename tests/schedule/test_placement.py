"""compute_at (bound inference), compute_inline, compute_root, against numpy."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.testing import check_against_numpy


def stencil(n):
    A = te.placeholder((n,), name="A")
    B = te.compute((n + 1,), lambda i: A[te.min(i, n - 1)] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + B[i + 1], name="C")
    return A, B, C


@pytest.mark.parametrize("factor", [1, 4, 7, 32])
def test_compute_at_shifted_region(factor, cpu_target):
    A, B, C = stencil(100)
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=factor)
    s[B].compute_at(s[C], xo)
    ir = str(tf.lower(s, [A, C]))
    # the producer computes exactly factor + 1 elements per tile
    assert f"allocate(float32[{factor + 1}]" in ir

    def ref(a):
        b = np.concatenate([a, a[-1:]]) * 2
        return b[:-1] + b[1:]

    check_against_numpy(s, [A], [C], ref, target=cpu_target)


def test_compute_at_2d_tile_region(cpu_target):
    A = te.placeholder((33, 17), name="A")
    B = te.compute((33, 17), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((32, 16), lambda i, j: B[i, j] + B[i + 1, j + 1], name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    s[B].compute_at(s[C], yo)
    ir = str(tf.lower(s, [A, C]))
    assert "allocate(float32[45]" in ir  # (8 + 1) x (4 + 1)
    check_against_numpy(
        s, [A], [C], lambda a: (a[:-1, :-1] + 1) + (a[1:, 1:] + 1), target=cpu_target
    )


@pytest.mark.parametrize("level", [0, 1, 2])
def test_nested_compute_at_chain(level, cpu_target):
    n = 50
    A = te.placeholder((n, n), name="A")
    B = te.compute((n, n), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((n, n), lambda i, j: B[i, j] - 1.0, name="C")
    D = te.compute((n, n), lambda i, j: C[i, j] * C[i, j], name="D")
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=8)
    leaves = s[D].leaf_iter_vars
    s[C].compute_at(s[D], leaves[level])
    s[B].compute_at(s[C], s[C].leaf_iter_vars[0])
    check_against_numpy(s, [A], [D], lambda a: (a * 3 - 1) ** 2, rtol=1e-5, target=cpu_target)


def test_compute_at_non_divisible_consumer_guards_producer(cpu_target):
    A = te.placeholder((1000,), name="A")
    B = te.compute((1000,), lambda i: te.exp(A[i]), name="B")
    C = te.compute((1000,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=64)
    s[B].compute_at(s[C], xo)
    s[C].vectorize(xi)
    check_against_numpy(s, [A], [C], lambda a: np.exp(a) * 2, rtol=1e-5, target=cpu_target)


def test_inline_chain(cpu_target):
    A = te.placeholder((40, 30), name="A")
    B = te.compute((40, 30), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((40, 30), lambda i, j: B[i, j] * 2.0, name="C")
    D = te.compute((30, 40), lambda i, j: C[j, i] - B[j, i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_inline()
    s[C].compute_inline()
    ir = str(tf.lower(s, [A, D]))
    assert "allocate" not in ir
    check_against_numpy(s, [A], [D], lambda a: ((a + 1) * 2 - (a + 1)).T, target=cpu_target)


def test_compute_root_restores():
    A, B, C = stencil(20)
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    s[B].compute_root()
    assert "allocate(float32[21]" in str(tf.lower(s, [A, C]))


def test_compute_at_reduction_consumer(cpu_target):
    A = te.placeholder((24, 36), name="A")
    B = te.compute((24, 36), lambda i, j: A[i, j] * A[i, j], name="B")
    k = te.reduce_axis((0, 36), name="k")
    C = te.compute((24,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=5)
    s[B].compute_at(s[C], ii)
    check_against_numpy(s, [A], [C], lambda a: (a * a).sum(axis=1), rtol=1e-4, target=cpu_target)
