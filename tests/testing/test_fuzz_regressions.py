"""Bugs the schedule fuzzer found (fuzz_schedules.KNOWN_BUGS), as regression tests."""

import os
import signal

import numpy as np

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.expr import Buffer, BufferLoad
from tensorforge.ir.stmt import BufferStore, For, PrimFunc
from tensorforge.te.expr import Var, const
from tensorforge.testing.fuzz_run import Case, run_isolated
from tensorforge.testing.guarded import guarded_copy
from tests.testing.fuzz_child import in_child

# -- bugs the fuzzer found (fuzz_schedules.KNOWN_BUGS), as regression tests ---------------------------


def test_regression_vectorized_producer_in_a_consumer_loop_reads_in_bounds():
    # found by the long run (seed 100, #936) at 39508d6: the masked 64-lane loads of PQ's inputs
    # (mask `lane < 1 and j + lane < 2`) became plain loads past the end of B in LLVM (SIGSEGV
    # against the guard page); since 48b1ac5 the mask is the constant `lane < 1`
    steps = (
        's[P].split(axis(s[P], "j"), nparts=64, tail="auto")',
        's[P].compute_at(s[D], axis(s[D], "j"))',
        's[P].vectorize(axis(s[P], "j.outer"))',
    )
    for exact in (False, True):
        case = Case(
            "multi_output", (("consumer", 1), ("n", 1), ("m", 2)), steps, exact=exact, seed=7872
        )
        assert run_isolated(case).status == "ok"


def test_regression_if_then_else_padding_reads_out_of_bounds():
    case = Case(
        "conv2d",
        tuple(
            {
                "batch": 1,
                "cin": 1,
                "cout": 1,
                "h": 30,
                "w": 30,
                "kh": 1,
                "kw": 1,
                "pad": 2,
                "stride": 1,
                "clamp": 0,
            }.items()
        ),
        side="start",
    )
    assert run_isolated(case).status == "ok"


def test_regression_peeled_tail_with_nparts_split():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=8, tail="peel")  # a tail of 2
    s[B].split(ii, nparts=3)
    mod = tf.build(s, [A, B])
    a, b = np.arange(10, dtype="float32"), np.full(10, np.nan, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_regression_peeled_tail_fused_with_outer_axis():
    A = te.placeholder((3, 10), name="A")
    B = te.compute((3, 10), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=8, tail="peel")
    s[B].reorder(jo, i, ji)
    s[B].fuse(i, ji)
    mod = tf.build(s, [A, B])
    a, b = np.arange(30, dtype="float32").reshape(3, 10), np.full((3, 10), np.nan, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)


def test_regression_rfactor_after_spatial_split():
    A = te.placeholder((6, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=2)
    ko, ki = s[B].split(k, factor=4)
    s.rfactor(B, ki)
    mod = tf.build(s, [A, B])
    a, b = np.random.default_rng(0).random((6, 16), dtype="float32"), np.full(6, np.nan, "float32")
    mod(a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5)


def test_regression_nparts_of_symbolic_extent_then_compute_at():
    m = te.var("m")
    A = te.placeholder((4, m), name="A")
    B = te.compute((4, m), lambda i, j: A[i, j] * 2.0, name="B")
    k = te.reduce_axis((0, m), name="k")
    C = te.compute((4,), lambda i: te.sum(B[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    s[C].split(k, nparts=3)
    s[B].compute_at(s[C], C.op.axis[0])
    mod = tf.build(s, [A, C])
    a, c = np.random.default_rng(0).random((4, 10), dtype="float32"), np.full(4, np.nan, "float32")
    mod(a, c)
    np.testing.assert_allclose(c, 2 * a.sum(axis=1), rtol=1e-5)


def test_regression_wide_masked_vector_load_reads_past_its_mask():
    from tensorforge.ir.expr import Broadcast, Ramp
    from tensorforge.te.expr import LT, And

    n, lanes = 8, 32
    A = Buffer("A", (const(n),), "float32")
    C = Buffer("C", (const(n),), "float32")
    c = Var("c")
    mask = And(
        LT(Ramp(const(0), const(1), lanes), Broadcast(const(n), lanes)),
        Broadcast(LT(c, const(1)), lanes),
    )
    index = Ramp(const(0), const(1), lanes)
    load_a = BufferLoad(A, (Ramp(c, const(1), lanes),), mask)
    body = For(
        c,
        const(0),
        const(6),
        BufferStore(C, (index,), BufferLoad(C, (index,), mask) + load_a, mask),
    )
    mod = tf.build(PrimFunc("main", (A, C), body))  # C[0:8] += A[c:c+8] where c < 1, 32 lanes wide

    def call():
        a = guarded_copy(np.ones(n, "float32"), align=4, name="A")
        out = guarded_copy(np.zeros(n, "float32"), align=4, name="C")
        mod(a.array, out.array)

    assert in_child(call) == 0


def test_regression_fuse_symbolic_axes_then_compute_at():
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    C = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="C")
    D = te.compute((n, m), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    fused = s[D].fuse(*D.op.axis)
    outer, inner = s[D].split(fused, factor=3)
    s[C].compute_at(s[D], outer)
    mod = tf.build(s, [A, D])
    a, d = np.ones((4, 5), "float32"), np.full((4, 5), np.nan, "float32")
    mod(a, d)
    np.testing.assert_array_equal(d, a * 2 + 1)


def test_regression_triangular_max_reduction_builds():
    A = te.placeholder((2, 29), name="A")
    r = te.reduce_axis((0, 2), name="r")
    c = te.reduce_axis((0, 29), name="c")
    C = te.compute((1,), lambda i: te.max(A[r, c], axis=[r, c], where=r <= c), name="C")
    s = te.create_schedule(C.op)

    def build_and_run():
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # LLVM's assertion message
        mod = tf.build(s, [A, C])
        a, out = np.arange(58, dtype="float32").reshape(2, 29), np.zeros(1, "float32")
        mod(a, out)
        assert out[0] == 57.0

    assert in_child(build_and_run) == 0


def test_regression_max_through_rfactor_with_the_reduction_loop_outside():
    A = te.placeholder((3, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    C = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(k, nparts=1)
    CF = s.rfactor(C, ki)
    s[C].reorder(s[C].op.reduce_axis[0], s[C].op.axis[0])
    s[CF].compute_at(s[C], s[C].op.axis[0])
    mod = tf.build(s, [A, C])
    a = np.zeros((3, 10), "float32")
    a[:, 9] = 1.0  # the max of every row is in the last column
    c = np.full(3, np.nan, "float32")
    mod(a, c)
    np.testing.assert_array_equal(c, [1.0, 1.0, 1.0])


def test_regression_stage_attached_under_a_fused_axis_of_a_peeled_split():
    # l (extent 1) split by 32 with a peeled tail, its inner fused with j.outer: the tail divides
    # the fused loop by 1, the main loop by 32; T2's region inside it was inferred for the latter
    # and so computed nothing for the second j tile (wrong T3[5]). Such a split is now guarded.
    A = te.placeholder((1, 6, 1), name="A")
    B = te.placeholder((1,), name="B")
    T1 = te.compute((1, 6, 1), lambda i, j, l: A[i, j, l] + B[l], name="T1")
    T2 = te.compute((1, 6, 1), lambda i, j, l: T1[i, j, l] + B[l], name="T2")
    T3 = te.compute((1, 6, 1), lambda i, j, l: T2[i, j, l] + B[l], name="T3")
    s = te.create_schedule(T3.op)
    _, j, l = T3.op.axis
    l_outer, j_outer, l_inner, j_inner = s[T3].tile(l, j, 32, 5, tail="auto")
    fused = s[T3].fuse(j_outer, l_inner)
    fo, fi = s[T3].split(fused, factor=64, tail="guard")
    s[T2].compute_at(s[T3], fi)
    mod = tf.build(s, [A, B, T3])
    rng = np.random.default_rng(3)
    a, b = rng.random((1, 6, 1), dtype="float32"), rng.random(1, dtype="float32")
    out = np.full((1, 6, 1), np.nan, "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a + 3 * b, rtol=1e-6)


def test_regression_clamped_region_starting_before_the_domain():
    # T2 reads T1[0 - i]; relaxed over the fused loop's guarded-off iterations, T1's region at
    # the second tile was [-1, 0], then clamped to one element starting at -1: T1 was never
    # computed there and T2 read garbage (1e34). The clamped window now starts in the domain.
    A = te.placeholder((1, 39, 1), name="A")
    T1 = te.compute((1, 39, 1), lambda i, j, l: te.max(A[i, j, l], 0.0), name="T1")
    T2 = te.compute((1, 39, 1), lambda i, j, l: T1[0 - i, j, l], name="T2")
    T3 = te.compute((1, 39, 1), lambda i, j, l: T2[i, j, l] * 2.0 - A[i, j, l], name="T3")
    s = te.create_schedule(T3.op)
    fused = s[T2].fuse(*s[T2].op.axis)
    outer, _ = s[T2].split(fused, factor=32, tail="guard")
    s[T1].compute_at(s[T2], outer)
    mod = tf.build(s, [A, T3])
    a = np.random.default_rng(5).standard_normal((1, 39, 1)).astype("float32")
    out = np.full((1, 39, 1), np.nan, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, np.maximum(a, 0) * 2 - a, rtol=1e-6)


def test_regression_float_max_chain_builds_quickly():
    # a scalar max reduction computed per element of a fused loop: with max/min written as
    # compare + select, LLVM's -O3 never finished on this module (llvm.maximum now)
    A = te.placeholder((8, 32), name="A")
    k1 = te.reduce_axis((0, 32), name="k1")
    M = te.compute((8,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((8, 32), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    s = te.create_schedule(E.op)
    fused = s[E].fuse(*E.op.axis)
    ko, ki = s[M].split(M.op.reduce_axis[0], factor=5)
    s[M].compute_at(s[E], fused)

    def build_and_run():
        signal.alarm(60)  # a hang fails the child, not the test session
        mod = tf.build(s, [A, E])
        a = np.random.default_rng(6).standard_normal((8, 32)).astype("float32")
        out = np.full((8, 32), np.nan, "float32")
        mod(a, out)
        np.testing.assert_allclose(out, np.exp(a - a.max(axis=1, keepdims=True)), rtol=1e-5)

    assert in_child(build_and_run) == 0


def test_regression_unrolled_fused_matmul_without_llvm_loop_vectorizer():
    # LLVM 22's loop vectorizer miscompiled this scalar nest (every other row of C wrong); it is
    # off now: loops are vectorized by the schedule
    A, B = te.placeholder((26, 23), name="A"), te.placeholder((23, 16), name="B")
    k = te.reduce_axis((0, 23), name="k")
    C = te.compute((26, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*C.op.axis)
    ko, fo, ki, fi = s[C].tile(k, fused, 4, 64, tail="auto")
    s[C].unroll(fo)
    s[C].unroll(ki)
    mod = tf.build(s, [A, B, C])
    rng = np.random.default_rng(8)
    a, b = (
        rng.standard_normal((26, 23), dtype="float32"),
        rng.standard_normal((23, 16), dtype="float32"),
    )
    out = np.full((26, 16), np.nan, "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_regression_min_max_chain_does_not_abort_llvm():
    # LLVM's loop + SLP vectorizers together produced invalid IR here and aborted the process
    A, B, C = (
        te.placeholder(shape, name=n) for shape, n in (((8, 9), "A"), ((9,), "B"), ((8,), "C"))
    )
    T1 = te.compute((8, 9), lambda i, j: te.min(A[i, j], C[i]) * B[j], name="T1")
    T2 = te.compute((8, 9), lambda i, j: te.max(T1[i, j], 0.0), name="T2")
    T4 = te.compute((8, 9), lambda i, j: T2[i, j] * C[i] * C[i], name="T4")
    s = te.create_schedule(T4.op)
    T1_global = s.cache_write(T1, "global")
    T2_global = s.cache_write(T2, "global")
    s[T2].compute_inline()
    s[T1].compute_inline()
    s[T1_global].compute_at(s[T2_global], s[T2_global].op.axis[0])

    def build_and_run():
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # LLVM's message
        mod = tf.build(s, [A, B, C, T4])
        rng = np.random.default_rng(9)
        a, b, c = (rng.standard_normal(sh).astype("float32") for sh in ((8, 9), (9,), (8,)))
        out = np.full((8, 9), np.nan, "float32")
        mod(a, b, c, out)
        ref = np.maximum(np.minimum(a, c[:, None]) * b, 0) * c[:, None] * c[:, None]
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)

    assert in_child(build_and_run) == 0


def test_regression_region_through_a_consumer_loop_whose_extent_names_a_deeper_loop():
    # fuzz seed 8080 #5601: B is computed at C's rfactor axis, its row region clamped by an
    # extent naming that axis; A.global, computed further out at C's i, relaxed B's loops but
    # not the axis inside B's extent, and its allocation named a loop it is not inside
    # (LoweringError from the verifier). Loops that enter through an extent are relaxed now.
    A = te.placeholder((1, 7), name="A")
    B = te.compute((1, 7), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    r = te.reduce_axis((0, 1), name="r")
    c = te.reduce_axis((0, 7), name="c")
    C = te.compute((1,), lambda i: te.sum(B[r, c], axis=[r, c]), name="C")
    s = te.create_schedule(C.op)
    fused = s[C].fuse(*s[C].op.reduce_axis)
    A_global = s.cache_read(A, "global", [B])
    _, inner = s[C].split(fused, factor=3, tail="guard")
    C_rf = s.rfactor(C, inner, factor_axis=1)
    (lane,) = [v for v in s[C].leaf_iter_vars if v.name == "r.c.fused.inner.v"]
    s[C_rf].compute_at(s[C], lane)
    s[B].compute_at(s[C], lane)
    s[A_global].compute_at(s[C], s[C].op.axis[0])
    mod = tf.build(s, [A, C])
    a = np.random.default_rng(8080).standard_normal((1, 7)).astype("float32")
    out = np.full((1,), np.nan, "float32")
    mod(a, out)
    np.testing.assert_allclose(out, [(a * 2 + 1).sum()], rtol=1e-5)


def test_regression_all_false_masked_piece_is_not_loaded():
    # fuzz seed 8080 #7622: a 16-lane masked load of A in two register-sized pieces, the second
    # with a mask the backend found all-false: it came out as a plain load past the end of A
    # (SIGSEGV against the guard page). Such pieces are now skipped by a branch on their mask.
    steps = (
        's[D].split(axis(s[D], "j"), nparts=5, tail="peel")',
        's[S].tile(axis(s[S], "k2"), axis(s[S], "i"), 16, 7, tail="guard")',
        's[D].fuse(axis(s[D], "i"), axis(s[D], "j.outer"))',
        's[S].compute_at(s[D], axis(s[D], "i.j.outer.fused"))',
        's[E].compute_at(s[D], axis(s[D], "i.j.outer.fused"))',
        's[E].vectorize(axis(s[E], "j"))',
    )
    for n, m in ((2, 1), (40, 7)):
        case = Case("softmax", (("n", n), ("m", m)), steps, side="end", seed=7622)
        outcome = run_isolated(case)
        assert outcome.status == "ok", outcome.message
