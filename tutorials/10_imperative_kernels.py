"""Tutorial 10: imperative kernels with tir.ir_builder, where te.compute cannot say it.

te.compute describes each output element as a function of the inputs, which covers element-wise
work, reductions and gathers. A running sum along a row, or a histogram whose writes go where the
data says, are loops with state and data-dependent stores. TVM programs write those with
`tvm.tir.ir_builder` inside a `te.extern`; the same code runs here, on the CPU (LLVM or C) and
on CUDA, and the extern stage sits in a schedule next to ordinary te stages.

Run: python tutorials/10_imperative_kernels.py [--small]
"""

import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te

SMALL = "--small" in sys.argv
rows, cols = (64, 257) if SMALL else (2048, 4099)
bins = 64
rng = np.random.default_rng(0)


def best_of(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


# 1. Row-wise prefix sums: a parallel loop over rows, a running total in a local variable.
def prefix_sums(ins, outs):
    ib = tf.tir.ir_builder.create()
    n, m = ins[0].shape
    data, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, n, name="i", kind="parallel") as i:
        total = ib.allocate("float32", (1,), name="total", scope="local")
        total[0] = 0.0
        with ib.for_range(0, m, name="j") as j:
            total[0] = total[0] + data[i, j]
            out[i, j] = total[0]
    return ib.get()


X = te.placeholder((rows, cols), name="X")
S = te.extern((rows, cols), [X], prefix_sums, name="S")
# 2. An ordinary te stage reads the extern's output: each row's sums over its total.
F = te.compute((rows, cols), lambda i, j: S[i, j] / S[i, cols - 1], name="F")
s = te.create_schedule(F.op)
outer, inner = s[F].split(s[F].op.axis[1], factor=tf.Target("llvm").vector_lanes("float32"))
s[F].vectorize(inner)
s[F].parallel(s[F].op.axis[0])
print(tf.lower(s, [X, F], simple_mode=True))
cumulative = tf.build(s, [X, F])

x = rng.random((rows, cols), dtype=np.float32) + 0.5
x_nd, f_nd = tf.nd.array(x), tf.nd.empty((rows, cols), "float32")
cumulative(x_nd, f_nd)
sums = np.cumsum(x, axis=1, dtype=np.float64)
tf.testing.assert_allclose(f_nd.numpy(), sums / sums[:, -1:], rtol=1e-4)
ours = best_of(lambda: cumulative(x_nd, f_nd))
numpy_ms = best_of(lambda: (lambda c: c / c[:, -1:])(np.cumsum(x, axis=1)))
print(f"cumulative fractions {rows}x{cols}: {ours:.3f} ms, NumPy {numpy_ms:.3f} ms")


# 3. A histogram: each value's bin is computed from the data, and the store goes there.
def histogram(ins, outs):
    ib = tf.tir.ir_builder.create()
    values, counts = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, bins, name="b") as b:
        counts[b] = 0
    with ib.for_range(0, ins[0].shape[0], name="k") as k:
        slot = ib.let("slot", (values[k] * bins).astype("int32"))
        with ib.if_scope(tf.tir.all(slot >= 0, slot < bins)):  # values outside [0, 1) skipped
            counts[slot] = counts[slot] + 1
    return ib.get()


count = rows * cols
V = te.placeholder((count,), name="V")
H = te.extern((bins,), [V], histogram, name="H", dtype="int32")
counting = tf.build(te.create_schedule(H.op), [V, H])
v = rng.random(count, dtype=np.float32)
v[:3] = [-0.5, 1.0, 2.0]  # three values outside the bins
v_nd, h_nd = tf.nd.array(v), tf.nd.empty((bins,), "int32")
counting(v_nd, h_nd)
expected = np.bincount((v[v < 1][v[v < 1] >= 0] * bins).astype(np.int64), minlength=bins)
np.testing.assert_array_equal(h_nd.numpy(), expected)
ours = best_of(lambda: counting(v_nd, h_nd))
numpy_ms = best_of(lambda: np.histogram(v, bins=bins, range=(0.0, 1.0)))
print(f"histogram of {count} values: {ours:.3f} ms, NumPy {numpy_ms:.3f} ms")


# 4. The same builder on CUDA: thread axes by scope_attr, a shared tile, a guarded tail.
def squares(ins, outs):
    ib = tf.tir.ir_builder.create()
    n = ins[0].shape[0]
    x, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    block, thread = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    ib.scope_attr(block, "thread_extent", (n + 127) // 128)
    ib.scope_attr(thread, "thread_extent", 128)
    tile = ib.allocate("float32", (128,), name="tile", scope="shared")
    index = ib.let("index", block * 128 + thread)
    with ib.if_scope(ib.likely(index < n)):
        tile[thread] = x[index]
        out[index] = tile[thread] * tile[thread]
    return ib.get()


A = te.placeholder((1001,), name="A")
B = te.extern((1001,), [A], squares, name="B")
gpu = tf.build(te.create_schedule(B.op), [A, B], target="cuda")
print(gpu.get_source("cuda"))  # (the source needs no GPU; running it does)
