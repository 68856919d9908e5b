"""Tutorial 4: operator fusion. y = sigmoid(relu(x) * 2 + 1), one kernel per op vs. one fused kernel.

Run: python tutorials/04_operator_fusion.py [--small]
"""

import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te
from tensorforge.schedule import auto_inline

SMALL = "--small" in sys.argv
n = 256 if SMALL else 4096
dev = tf.cpu(0)
target = tf.Target("llvm")
lanes = target.vector_lanes("float32")
rng = np.random.default_rng(0)
x_np = rng.standard_normal((n, n)).astype("float32")
expected = 1 / (1 + np.exp(-(np.maximum(x_np, 0) * 2 + 1)))
moved = 2 * x_np.nbytes  # what a fused kernel must move: read x once, write y once


def vectorized(s, t):
    fused = s[t].fuse(*s[t].op.axis)
    outer, inner = s[t].split(fused, factor=4 * lanes)
    s[t].vectorize(inner)
    s[t].parallel(outer)


def unary_kernel(fn, name):
    a = te.placeholder((n, n), name="a")
    b = te.compute((n, n), lambda i, j: fn(a[i, j]), name=name)
    s = te.create_schedule(b.op)
    vectorized(s, b)
    return tf.build(s, [a, b])


# 1. one kernel per operator: four passes over memory
kernels = [
    unary_kernel(lambda v: te.max(v, 0.0), "relu"),
    unary_kernel(lambda v: v * 2.0, "scale"),
    unary_kernel(lambda v: v + 1.0, "shift"),
    unary_kernel(te.sigmoid, "sigmoid"),
]
bufs = [tf.nd.array(x_np, dev)] + [tf.nd.empty((n, n), "float32", dev) for _ in range(4)]


def run_unfused():
    for k, mod in enumerate(kernels):
        mod(bufs[k], bufs[k + 1])


run_unfused()
np.testing.assert_allclose(bufs[-1].numpy(), expected, rtol=1e-5, atol=1e-6)

# 2. the same four stages declared as a graph and fused by auto_inline
x = te.placeholder((n, n), name="x")
relu = te.compute((n, n), lambda i, j: te.max(x[i, j], 0.0), name="relu")
scaled = te.compute((n, n), lambda i, j: relu[i, j] * 2.0, name="scale")
shifted = te.compute((n, n), lambda i, j: scaled[i, j] + 1.0, name="shift")
y = te.compute((n, n), lambda i, j: te.sigmoid(shifted[i, j]), name="y")
s = te.create_schedule(y.op)
auto_inline(s)
vectorized(s, y)
print(tf.lower(s, [x, y]))
fused = tf.build(s, [x, y])
X, Y = tf.nd.array(x_np, dev), tf.nd.empty((n, n), "float32", dev)
fused(X, Y)
np.testing.assert_allclose(Y.numpy(), expected, rtol=1e-5, atol=1e-6)


def median_time(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


rows = [
    ("4 kernels (unfused)", median_time(run_unfused)),
    ("1 fused kernel", median_time(lambda: fused(X, Y))),
    ("numpy", median_time(lambda: 1 / (1 + np.exp(-(np.maximum(x_np, 0) * 2 + 1))))),
]
print(
    f"\ny = sigmoid(relu(x) * 2 + 1) on {n}x{n} float32 (GB/s counts one read of x and one write of y)"
)
print(f"{'version':<22} {'time (ms)':>10} {'GB/s':>8}")
for name, seconds in rows:
    print(f"{name:<22} {seconds * 1e3:10.2f} {moved / seconds / 1e9:8.2f}")
