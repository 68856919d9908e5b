"""An ir_builder extern whose output is an intermediate (a te stage reads it): its flat and n-d
accesses land in the allocated buffer's elements, as they do in a kernel argument (the n-d
store was flattened twice: i * 257 * 257 + j * 257)."""

import numpy as np

import tensorforge as tf
from tensorforge import te


def running_sums(ins, outs):
    ib = tf.tir.ir_builder.create()
    n, m = ins[0].shape
    data, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, n, name="i") as i:
        out[i, 0] = data[i, 0]
        with ib.for_range(1, m, name="j") as j:
            out[i * m + j] = out[i, j - 1] + data[i * m + j]  # flat and n-d, both ways
    return ib.get()


def test_an_extern_read_by_a_compute_stage():
    rows, cols = 5, 13
    X = te.placeholder((rows, cols), name="X")
    S = te.extern((rows, cols), [X], running_sums, name="S")
    F = te.compute((rows, cols), lambda i, j: S[i, j] * 2.0 + S[i, cols - 1], name="F")
    f = tf.build(te.create_schedule(F.op), [X, F])
    x = np.random.default_rng(5).standard_normal((rows, cols)).astype("float32")
    out = tf.nd.empty((rows, cols), "float32")
    f(tf.nd.array(x), out)
    sums = np.cumsum(x, axis=1)
    np.testing.assert_allclose(out.numpy(), sums * 2 + sums[:, -1:], rtol=1e-5, atol=1e-5)
