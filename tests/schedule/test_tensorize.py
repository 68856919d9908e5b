"""tensorize with CPU intrinsics, against NumPy: an extern C GEMM micro-kernel and an LLVM
intrinsic; mismatches between the nest and the intrinsic name what differs."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te

UKERNEL_C = """
int tf_test_ukernel_reset(float *c, int ldc, int mr, int nr) {
    for (int i = 0; i < mr; ++i) for (int j = 0; j < nr; ++j) c[i * ldc + j] = 0.0f;
    return 0;
}
int tf_test_ukernel_update(float *c, const float *a, const float *b, int lda, int ldb, int ldc,
                           int mr, int nr, int kc) {
    for (int i = 0; i < mr; ++i)
        for (int k = 0; k < kc; ++k)
            for (int j = 0; j < nr; ++j) c[i * ldc + j] += a[i * lda + k] * b[k * ldb + j];
    return 0;
}
"""


def gemm_intrin(mr, nr, kc):
    """C[mr, nr] (+)= A[mr, kc] @ B[kc, nr] on tiles of larger row-major matrices."""
    a = te.placeholder((mr, kc), name="a")
    b = te.placeholder((kc, nr), name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mr, nr), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    binds = {
        t: tf.tir.decl_buffer(
            t.shape, t.dtype, name=t.name.upper(), strides=[te.var(f"s{t.name}"), 1]
        )
        for t in (a, b, c)
    }

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tf.tir.call_extern(
            "int32", "tf_test_ukernel_reset", cc.access_ptr("w"), cc.strides[0], mr, nr
        )
        update = tf.tir.call_extern(
            "int32",
            "tf_test_ukernel_update",
            cc.access_ptr("rw"),
            aa.access_ptr("r"),
            bb.access_ptr("r"),
            aa.strides[0],
            bb.strides[0],
            cc.strides[0],
            mr,
            nr,
            kc,
        )
        return [reset, update], reset, update

    return te.decl_tensor_intrin(c.op, fintrin, name=f"gemm{mr}x{nr}x{kc}", binds=binds)


def matmul(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def run_matmul(s, A, B, C, M, N, K, seed=0):
    f = tf.build(s, [A, B, C])
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype("float32")
    b = rng.uniform(-1, 1, (K, N)).astype("float32")
    c = tf.nd.empty((M, N), "float32")
    f(tf.nd.array(a), tf.nd.array(b), c)
    tf.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module", autouse=True)
def ukernel():
    tf.runtime.compile_c(UKERNEL_C)


@pytest.mark.parametrize("M, N, K, kc", [(24, 40, 36, 12), (8, 16, 7, 7), (4, 8, 1, 1)])
def test_gemm_microkernel_tensorized(M, N, K, kc):
    mr, nr = 4, 8
    A, B, C = matmul(M, N, K)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (k,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    ko, ki = s[C].split(k, factor=kc)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, gemm_intrin(mr, nr, kc))
    text = str(tf.lower(s, [A, B, C]))
    assert "tf_test_ukernel_update" in text and "k.inner" not in text
    run_matmul(s, A, B, C, M, N, K)


def test_reads_of_packed_panels_match_knowing_the_tile_ranges():
    # C reads B's panels as packedB[j // 8, k, j % 8]; with j = 8 * jo + j' (j' < 8) that is
    # packedB[jo, k, j'], the intrinsic's b[k, j] with ldb = 8
    M, N, K = 8, 24, 12
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    packedB = te.compute((N // 8, K, 8), lambda p, kk, x: B[kk, p * 8 + x], name="packedB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (M, N), lambda i, j: te.sum(A[i, k] * packedB[j // 8, k, j % 8], axis=k), name="C"
    )
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, gemm_intrin(4, 8, 4))
    assert "tf_test_ukernel_update" in str(tf.lower(s, [A, B, C]))
    run_matmul(s, A, B, C, M, N, K)


def test_whole_reduction_inside_uses_the_body():
    M, N, K = 12, 16, 9
    A, B, C = matmul(M, N, K)
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8)
    s[C].reorder(io, jo, ii, ji, C.op.reduce_axis[0])
    s[C].tensorize(ii, gemm_intrin(4, 8, K))
    assert "tf_test_ukernel_reset" in str(tf.lower(s, [A, B, C]))
    run_matmul(s, A, B, C, M, N, K)


def test_llvm_intrinsic_copy():
    n, tile = 48, 16
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i], name="B")
    a = te.placeholder((tile,), name="a")
    b = te.compute((tile,), lambda i: a[i], name="b")

    def fintrin(ins, outs):
        return tf.tir.call_llvm_intrin(
            "handle",
            "llvm.memcpy.p0.p0.i64",
            outs[0].access_ptr("w"),
            ins[0].access_ptr("r"),
            tf.tir.const(4 * tile, "int64"),
            tf.tir.const(False),
        )

    copy = te.decl_tensor_intrin(b.op, fintrin, name="memcpy16")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=tile)
    s[B].tensorize(i, copy)
    f = tf.build(s, [A, B])
    x = np.random.default_rng(3).uniform(size=n).astype("float32")
    y = tf.nd.empty((n,), "float32")
    f(tf.nd.array(x), y)
    tf.testing.assert_allclose(y, x)


@pytest.mark.parametrize(
    "factors, transpose, message",
    [
        ((4, 4), False, "loop 'j.inner' has extent 4, but intrinsic 'gemm4x8x12' axis 'j' has 8"),
        ((4, 8), True, "index 0 of 'B' moves as j inside the tensorized loops"),
    ],
)
def test_mismatch_names_what_differs(factors, transpose, message):
    M, N, K = 8, 16, 12
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((N, K) if transpose else (K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    read = (lambda i, j: B[j, k]) if transpose else (lambda i, j: B[k, j])
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * read(i, j), axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, *factors)
    s[C].reorder(io, jo, ii, ji, k)
    s[C].tensorize(ii, gemm_intrin(4, 8, 12))
    with pytest.raises(tf.ScheduleError, match=message.replace("(", r"\(")):
        tf.lower(s, [A, B, C])


def test_partial_tiles_and_missing_update_are_refused():
    A, B, C = matmul(10, 16, 12)  # 10 rows: the last tile of 4 is partial
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 4, 8, tail="guard")
    s[C].reorder(io, jo, ii, ji, C.op.reduce_axis[0])
    s[C].tensorize(ii, gemm_intrin(4, 8, 12))
    with pytest.raises(tf.ScheduleError, match="partial tile"):
        tf.lower(s, [A, B, C])
    A, B, C = matmul(8, 8, 12)
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=6)
    s[C].reorder(ko, *C.op.axis, ki)
    a = te.placeholder((8, 6), name="a")
    b = te.placeholder((6, 8), name="b")
    kk = te.reduce_axis((0, 6), name="kk")
    c = te.compute((8, 8), lambda i, j: te.sum(a[i, kk] * b[kk, j], axis=kk), name="c")
    body_only = te.decl_tensor_intrin(c.op, lambda ins, outs: tf.tir.call_extern("int32", "f"))
    s[C].tensorize(C.op.axis[0], body_only)
    with pytest.raises(tf.ScheduleError, match=r"must return \(body, reset, update\)"):
        tf.lower(s, [A, B, C])
