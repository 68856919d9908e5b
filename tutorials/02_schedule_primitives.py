"""Tutorial 2: the schedule primitives, each with the loop IR it produces, checked against numpy.

Run: python tutorials/02_schedule_primitives.py [--small]
"""

import sys

import numpy as np

import tensorforge as tf
from tensorforge import te

SMALL = "--small" in sys.argv
n, m = (37, 29) if SMALL else (1000, 999)
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (n, m)).astype("float32")


def declare():
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((n, m), lambda i, j: B[i, j] + 1.0, name="C")
    return A, B, C


def show(title, s, A, C):
    print(f"\n=== {title} ===")
    print(tf.lower(s, [A, C]))
    c = np.empty((n, m), "float32")
    tf.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


A, B, C = declare()
s = te.create_schedule(C.op)
show("default: two loop nests", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
xo, xi = s[C].split(C.op.axis[1], factor=8)  # the tail of a non-divisible split is peeled
show("split j by 8 (tail='auto' peels the remainder)", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
xo, xi = s[C].split(C.op.axis[1], factor=8, tail="guard")
show("split with tail='guard': an if in the body", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
show("tile 4x8", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
f = s[C].fuse(*C.op.axis)
fo, fi = s[C].split(f, factor=16)
s[C].vectorize(fi)
s[C].parallel(fo)
show("fuse, split, vectorize the inner 16, parallel outer", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
i, j = C.op.axis
jo, ji = s[C].split(j, factor=4)
s[C].reorder(jo, i, ji)
s[C].unroll(ji)
show("reorder (jo, i, ji) and unroll ji", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
s[B].compute_inline()
show("compute_inline: B fused into C", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
io, ii = s[C].split(C.op.axis[0], factor=4)
s[B].compute_at(s[C], io)
show("compute_at: B computed per 4-row tile of C (bound inference sizes it)", s, A, C)

A, B, C = declare()
s = te.create_schedule(C.op)
s[C].pragma(C.op.axis[1], "auto_unroll_max_step", 16)
s[B].compute_at(s[C], C.op.axis[0])
s[B].compute_root()
show("compute_root undoes compute_at", s, A, C)
print("\ntutorial 2: every schedule matches numpy")
