"""Tutorial 1: declaring computations with tensor expressions.

Run: python tutorials/01_tensor_expressions.py [--small]
"""

import sys

import numpy as np

import tensorforge as tf
from tensorforge import te

SMALL = "--small" in sys.argv
n = 64 if SMALL else 1024

# A computation is a graph of tensors. Placeholders are inputs; compute() describes each element.
A = te.placeholder((n, n), name="A")
B = te.placeholder((n,), name="B")
C = te.compute((n, n), lambda i, j: A[i, j] * 2.0 + B[j], name="C")
print("C =", C, "computed by", C.op.body[0])

# Reductions use reduce axes; where= masks terms; te.max / te.min work the same way.
k = te.reduce_axis((0, n), name="k")
row_sum = te.compute((n,), lambda i: te.sum(C[i, k], axis=k, where=k % 2 == 0), name="row_sum")

# Math intrinsics, selection and casts.
D = te.compute(
    (n, n),
    lambda i, j: te.if_then_else(C[i, j] > 0, te.exp(-C[i, j]), te.sigmoid(C[i, j])),
    name="D",
)

# A user-defined reducer: argmax over (index, value) pairs.
argmax = te.comm_reducer(
    lambda x, y: (
        te.if_then_else(x[1] >= y[1], x[0], y[0]),
        te.if_then_else(x[1] >= y[1], x[1], y[1]),
    ),
    lambda t0, t1: (te.const(-1, t0), te.const(-np.inf, t1)),
    name="argmax",
)
r = te.reduce_axis((0, n), name="r")
idx, val = te.compute((n,), lambda i: argmax((r, D[i, r]), axis=r), name="amax")

# Symbolic shapes: one kernel for every size.
m = te.var("m")
X = te.placeholder((m,), name="X")
Y = te.compute((m,), lambda i: X[i] * X[i] + 1.0, name="Y")

# The default schedule is a plain loop nest; build and run it.
s = te.create_schedule([row_sum.op, idx.op])
print(tf.lower(s, [A, B, row_sum, idx, val]))
mod = tf.build(s, [A, B, row_sum, idx, val])
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (n, n)).astype("float32")
b = rng.uniform(-1, 1, n).astype("float32")
rs, ix, vl = np.empty(n, "float32"), np.empty(n, "int32"), np.empty(n, "float32")
mod(a, b, rs, ix, vl)
c = a * 2 + b
np.testing.assert_allclose(rs, c[:, ::2].sum(axis=1), rtol=1e-4, atol=1e-4)
d = np.where(c > 0, np.exp(-c), 1 / (1 + np.exp(-c)))
np.testing.assert_array_equal(ix, d.argmax(axis=1))

dyn = tf.build(te.create_schedule(Y.op), [X, Y])
for size in (5, 1000):
    x = rng.uniform(-1, 1, size).astype("float32")
    y = np.empty(size, "float32")
    dyn(x, y)
    np.testing.assert_allclose(y, x * x + 1, rtol=1e-6)
print("tutorial 1: every result matches numpy")
