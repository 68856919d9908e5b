"""cache_read / cache_write / rfactor / set_scope / storage_align / double_buffer / packing / fusion."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.schedule import auto_inline
from tensorforge.testing import check_against_numpy


def matmul(n, m, l, name="C"):
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name=name)
    return A, B, C, k


def mm_ref(a, b):
    return a @ b


def test_cache_read_alone(cpu_target):
    A, B, C, k = matmul(20, 24, 12)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "global", [C])
    assert AA.name == "A.global"
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4, target=cpu_target)


def test_cache_write_alone(cpu_target):
    A, B, C, k = matmul(20, 24, 12)
    s = te.create_schedule(C.op)
    s.cache_write(C, "local")
    i, j = s[C].op.axis
    s[C].vectorize(s[C].split(j, factor=8)[1])
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4, target=cpu_target)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_cache_write_compute_at_each_level(level):
    A, B, C, k = matmul(37, 45, 19)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 16)
    leaves = s[C].leaf_iter_vars
    s[CC].compute_at(s[C], leaves[level])
    ci, cj = s[CC].op.axis
    (kk,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kk, factor=4)
    s[CC].reorder(ko, ci, ki, cj)
    s[CC].vectorize(cj) if level >= 1 else None
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_cache_read_compute_at_each_level(level):
    A, B, C, k = matmul(33, 40, 21)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    ko, ki = s[C].split(k, factor=5)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    leaves = s[C].leaf_iter_vars
    s[AA].compute_at(s[C], leaves[[0, 1, 2][level]])
    ir = str(tf.lower(s, [A, B, C]))
    assert "A.local" in ir
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4)


def test_cache_read_and_write_together(cpu_target):
    A, B, C, k = matmul(32, 32, 32)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, 8, 8)
    s[CC].compute_at(s[C], jo)
    (kk,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kk, factor=8)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4, target=cpu_target)


def test_cache_of_a_cache(cpu_target):
    A = te.placeholder((50,), name="A")
    B = te.compute((50,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    A1 = s.cache_read(A, "global", [B])
    A2 = s.cache_read(A1, "local", [B])
    xo, xi = s[B].split(B.op.axis[0], factor=8)
    s[A2].compute_at(s[B], xo)
    check_against_numpy(s, [A], [B], lambda a: a * 2, target=cpu_target)


@pytest.mark.parametrize("red,np_red", [("sum", np.sum), ("max", np.max), ("min", np.min)])
def test_rfactor_split_and_parallel(red, np_red, cpu_target):
    A = te.placeholder((6, 1000), name="A")
    k = te.reduce_axis((0, 1000), name="k")
    B = te.compute((6,), lambda i: getattr(te, red)(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=16)
    BF = s.rfactor(B, ki)
    assert tuple(int(e.value) for e in BF.shape) == (16, 6)
    s[BF].parallel(s[BF].op.axis[0])
    check_against_numpy(
        s, [A], [B], lambda a: np_red(a, axis=1), rtol=1e-4, atol=1e-4, target=cpu_target
    )


def test_rfactor_vectorized_factor_axis_inner(cpu_target):
    A = te.placeholder((1003,), name="A")
    k = te.reduce_axis((0, 1003), name="k")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=8)
    BF = s.rfactor(B, ki, factor_axis=1)
    (ro,) = s[BF].op.reduce_axis
    s[BF].reorder(s[BF].op.axis[0], ro, s[BF].op.axis[1])
    s[BF].vectorize(s[BF].op.axis[1])
    check_against_numpy(
        s, [A], [B], lambda a: a.sum(keepdims=True)[:1], rtol=1e-4, atol=1e-4, target=cpu_target
    )


def test_rfactor_argmax(cpu_target):
    def fcombine(x, y):
        take = x[1] >= y[1]
        return te.if_then_else(take, x[0], y[0]), te.if_then_else(take, x[1], y[1])

    argmax = te.comm_reducer(
        fcombine, lambda t0, t1: (te.const(-1, t0), te.const(-np.inf, t1)), "argmax"
    )
    A = te.placeholder((5, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    I, V = te.compute((5,), lambda i: argmax((k, A[i, k]), axis=k), name="T")
    s = te.create_schedule(I.op)
    ko, ki = s[I].split(k, factor=8)
    s.rfactor(I, ki)
    check_against_numpy(
        s, [A], [I, V], lambda a: (a.argmax(1).astype("int32"), a.max(1)), target=cpu_target
    )


def test_packing_matmul(cpu_target):
    n, bn = 64, 16
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    packed = te.compute((n // bn, n, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute(
        (n, n), lambda i, j: te.sum(A[i, k] * packed[j // bn, k, j % bn], axis=k), name="C"
    )
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].vectorize(ji)
    s[packed].vectorize(s[packed].op.axis[2])
    s[packed].parallel(s[packed].op.axis[0])
    check_against_numpy(s, [A, B], [C], mm_ref, rtol=1e-4, atol=1e-4, target=cpu_target)


def test_set_scope_storage_align_double_buffer(cpu_target):
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((16, 16), lambda i, j: B[j, i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].set_scope("local")
    s[B].storage_align(B.op.axis[0], 8, 1)
    s[B].double_buffer()
    ir = str(tf.lower(s, [A, C]))
    assert "B[i * 17 + j]" in ir.replace("(", "").replace(")", "") or "17" in ir
    check_against_numpy(s, [A], [C], lambda a: ((a + 1) * 2).T, target=cpu_target)


def test_auto_inline_chain_and_diamond(cpu_target):
    A = te.placeholder((30, 20), name="A")
    B = te.compute((30, 20), lambda i, j: te.max(A[i, j], 0.0), name="relu")
    C = te.compute((30, 20), lambda i, j: B[i, j] * 2.0, name="scale")
    D = te.compute((30, 20), lambda i, j: B[i, j] + 1.0, name="shift")  # diamond: B has 2 readers
    E = te.compute((30, 20), lambda i, j: te.sigmoid(C[i, j] + D[i, j]), name="out")
    s = te.create_schedule(E.op)
    auto_inline(s)
    ir = str(tf.lower(s, [A, E]))
    assert "allocate" not in ir and ir.count("for ") == 2

    def ref(a):
        b = np.maximum(a, 0)
        return 1 / (1 + np.exp(-(b * 2 + b + 1)))

    check_against_numpy(s, [A], [E], ref, rtol=1e-5, target=cpu_target)


def test_epilogue_fusion_matmul_bias_relu():
    n, m, l = 40, 48, 24
    A, B, C, k = matmul(n, m, l, name="mm")
    bias = te.placeholder((m,), name="bias")
    D = te.compute((n, m), lambda i, j: C[i, j] + bias[j], name="add")
    E = te.compute((n, m), lambda i, j: te.max(D[i, j], 0.0), name="relu")
    s = te.create_schedule(E.op)
    auto_inline(s)  # the bias add fuses into relu
    io, jo, ii, ji = s[E].tile(E.op.axis[0], E.op.axis[1], 8, 16)
    s[C].compute_at(s[E], jo)  # the matmul tile is computed inside the epilogue's tile
    s[C].vectorize(s[C].op.axis[1])
    s[E].vectorize(ji)
    ir = str(tf.lower(s, [A, B, bias, E]))
    assert "allocate(float32[128]" in ir  # one 8x16 output tile, never the whole matmul
    check_against_numpy(
        s,
        [A, B, bias],
        [E],
        lambda a, b, c: np.maximum(a @ b + c, 0),
        rtol=1e-4,
        atol=1e-4,
    )


# -- misuse -------------------------------------------------------------------------------------


def test_cache_read_reader_does_not_read():
    A, B, C, k = matmul(8, 8, 8)
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(tf.ScheduleError, match="cache_read: 'D' does not read 'A'.*read by: C"):
        s.cache_read(A, "local", [D])


def test_rfactor_non_reduction_axis():
    A, B, C, k = matmul(8, 8, 8)
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError,
        match="rfactor: 'i' of stage 'C' is not a reduction axis; reduction axes are: k",
    ):
        s.rfactor(C, C.op.axis[0])


def test_compute_at_cache_into_non_consumer():
    A, B, C, k = matmul(8, 8, 8)
    D = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="D")
    s = te.create_schedule([C.op, D.op])
    AA = s.cache_read(A, "local", [C])
    with pytest.raises(tf.ScheduleError, match="'D' does not consume 'A.local'"):
        s[AA].compute_at(s[D], D.op.axis[0])


def test_cache_write_after_split():
    A, B, C, k = matmul(8, 8, 8)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(tf.ScheduleError, match="call cache_write before splitting"):
        s.cache_write(C, "local")


def test_auto_inline_works_every_time(cpu_target):
    import importlib

    import tensorforge.schedule as schedule

    importlib.import_module("tensorforge.schedule.fusion")  # a submodule import keeps the function
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((7,), lambda i: B[i] * 2.0, name="C")
    for _ in range(2):
        s = te.create_schedule(C.op)
        assert callable(schedule.auto_inline) and schedule.auto_inline(s) is s
        assert s[B].attach_type == "inline"
        check_against_numpy(s, [A], [C], lambda a: (a + 1.0) * 2.0, target=cpu_target)
