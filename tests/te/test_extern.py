"""te.extern against NumPy: packed Python functions and extern C functions inside kernels."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.runtime.packed_func import PackedFuncError

SEEN = []


@tf.register_func("test.extern.matmul", override=True)
def numpy_matmul(a, b, c, alpha):
    SEEN.append((type(a).__name__, a.shape, b.shape, c.shape, alpha))
    c.copyfrom(alpha * (a.numpy() @ b.numpy()))


@pytest.mark.parametrize("n, l, m", [(13, 7, 5), (1, 1, 1), (31, 3, 17)])
def test_packed_numpy_matmul_between_compute_stages(n, l, m):  # noqa: E741
    A = te.placeholder((n, l), name="A")
    B = te.placeholder((l, m), name="B")
    A2 = te.compute((n, l), lambda i, j: A[i, j] * 2.0, name="A2")
    C = te.extern(
        (n, m),
        [A2, B],
        lambda ins, outs: tf.tir.call_packed("test.extern.matmul", ins[0], ins[1], outs[0], 0.5),
        name="C",
    )
    D = te.compute((n, m), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=4)
    s[D].parallel(io)
    f = tf.build(s, [A, B, D])
    rng = np.random.default_rng(n)
    a, b = (
        rng.uniform(-1, 1, (n, l)).astype("float32"),
        rng.uniform(-1, 1, (l, m)).astype("float32"),
    )
    d = tf.nd.empty((n, m), "float32")
    SEEN.clear()
    f(tf.nd.array(a), tf.nd.array(b), d)
    assert SEEN == [("NDArray", (n, l), (l, m), (n, m), 0.5)]
    tf.testing.assert_allclose(d, 0.5 * (2 * a) @ b + 1, rtol=1e-5, atol=1e-6)


def test_extern_output_is_an_argument_with_symbolic_shape():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.extern(
        (n,), [A], lambda ins, outs: tf.tir.call_packed("test.extern.addone", ins[0], outs[0])
    )

    @tf.register_func("test.extern.addone", override=True)
    def addone(x, y):
        tf.nd.array(x.numpy() + 1).copyto(y)

    f = tf.build(te.create_schedule(B.op), [A, B])
    for size in (1, 10):
        a = np.arange(size, dtype="float32")
        b = tf.nd.empty((size,), "float32")
        f(tf.nd.array(a), b)
        tf.testing.assert_allclose(b, a + 1)


def test_a_raising_packed_function_raises_after_the_kernel():
    A = te.placeholder((4,), name="A")
    B = te.extern((4,), [A], lambda ins, outs: tf.tir.call_packed("test.extern.fails", *ins, *outs))

    @tf.register_func("test.extern.fails", override=True)
    def fails(x, y):
        raise ValueError("bad input")

    f = tf.build(te.create_schedule(B.op), [A, B])
    with pytest.raises(PackedFuncError, match="ValueError: bad input"):
        f(tf.nd.array(np.ones(4, "float32")), tf.nd.empty((4,), "float32"))
    B2 = te.extern((4,), [A], lambda ins, outs: tf.tir.call_packed("test.extern.nobody", *outs))
    g = tf.build(te.create_schedule(B2.op), [A, B2])
    with pytest.raises(PackedFuncError, match="no function is registered as 'test.extern.nobody'"):
        g(tf.nd.array(np.ones(4, "float32")), tf.nd.empty((4,), "float32"))


SAXPY_C = """
void tf_test_saxpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


def test_call_extern_c_function():
    tf.runtime.compile_c(SAXPY_C)
    n = 37
    X = te.placeholder((n,), name="X")
    Y0 = te.compute((n,), lambda i: X[i] * X[i], name="Y0")

    def fcompute(ins, outs):
        ib = tf.tir.ir_builder.create()
        ib.emit(
            tf.tir.call_extern(
                "int32", "tf_test_saxpy", outs[0].access_ptr("w"), ins[0].data, 0.0, 0
            )
        )
        ib.emit(
            tf.tir.call_extern("int32", "tf_test_saxpy", outs[0], ins[1], 3.0, n)
        )  # buffers pass as pointers
        return ib.get()

    Y = te.extern((n,), [Y0, X], fcompute, name="Y")
    s = te.create_schedule(Y.op)
    assert "extern:tf_test_saxpy" in str(tf.lower(s, [X, Y]))
    f = tf.build(s, [X, Y])
    x = np.random.default_rng(5).uniform(-1, 1, n).astype("float32")
    y = tf.nd.array(np.full(n, 2.0, "float32"))  # the output starts as whatever is there
    f(tf.nd.array(x), y)
    tf.testing.assert_allclose(y, 2.0 + 3.0 * x, rtol=1e-6)


def test_extern_errors_name_the_stage():
    A = te.placeholder((4,), name="A")
    with pytest.raises(tf.ExprError, match="expected tf.tir.call_packed"):
        te.extern((4,), [A], lambda ins, outs: 3.0, name="E")
    with pytest.raises(tf.ExprError, match="argument 0 is the tensor 'A'"):
        te.extern((4,), [A], lambda ins, outs: tf.tir.call_packed("f", A), name="E")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    E = te.extern((4,), [B], lambda ins, outs: tf.tir.call_packed("f", ins[0], outs[0]), name="E")
    s = te.create_schedule(E.op)
    s[B].compute_inline()
    with pytest.raises(tf.ScheduleError, match="'B' is inlined, but 'E'"):
        tf.lower(s, [A, E])
