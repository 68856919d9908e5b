"""Tutorial 3: the classic CPU GEMM journey, step by step, each step beside numpy in the same run.

baseline -> blocking -> vectorization -> loop permutation -> array packing -> write cache -> parallel

Steps 1-6 run on one core; step 7 on every core the kernel pool has (TF_NUM_THREADS). NumPy
(OpenBLAS) is timed once, warm, after all our steps: its worker threads keep spinning for a
while after each call, and timed between our steps they took a core from the parallel step.

Run: python tutorials/03_gemm_cpu.py [--small]
"""

import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te
from tensorforge.runtime.native_call import num_threads

SMALL = "--small" in sys.argv
N = 64 if SMALL else 1024
bn = 32  # block size
dev = tf.cpu(0)
rng = np.random.default_rng(0)
a_np = rng.uniform(-1, 1, (N, N)).astype("float32")
b_np = rng.uniform(-1, 1, (N, N)).astype("float32")
a, b = tf.nd.array(a_np, dev), tf.nd.array(b_np, dev)
expected = a_np @ b_np


def numpy_gflops() -> float:
    a_np @ b_np  # warm-up: OpenBLAS starts its threads and touches its buffers
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        a_np @ b_np
        times.append(time.perf_counter() - t0)
    return 2 * N**3 / np.median(times) / 1e9


def declare(packed: bool = False):
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    if not packed:
        C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return A, B, k, None, C
    packedB = te.compute((N // bn, N, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute(
        (N, N), lambda i, j: te.sum(A[i, k] * packedB[j // bn, k, j % bn], axis=k), name="C"
    )
    return A, B, k, packedB, C


def measure(title, s, A, B, C, rows):
    mod = tf.build(s, [A, B, C])
    c = tf.nd.empty((N, N), "float32", dev)
    mod(a, b, c)
    np.testing.assert_allclose(c.numpy(), expected, rtol=1e-3, atol=1e-3)
    number = 1 if title == "baseline" and not SMALL else 3
    seconds = mod.time_evaluator(mod.entry_name, dev, number=number, repeat=3)(a, b, c).median
    ours = 2 * N**3 / seconds / 1e9
    speedup = f"   {ours / rows[-1][1]:5.2f}x the previous step" if rows else ""
    rows.append((title, ours))
    print(f"{title:<20} {ours:8.1f} GFLOP/s{speedup}")
    return mod


rows: list = []
print(f"GEMM {N}x{N}x{N} float32 on {tf.Target('llvm').mcpu}")

# 1. baseline: the default loop nest i, j, k
A, B, k, _, C = declare()
s = te.create_schedule(C.op)
measure("baseline", s, A, B, C, rows)

# 2. blocking: 32x32 tiles keep a block of C in cache while k streams
A, B, k, _, C = declare()
s = te.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ki, ii, ji)
measure("blocking", s, A, B, C, rows)

# 3. vectorization: the innermost j loop becomes vector instructions
s[C].vectorize(ji)
measure("vectorization", s, A, B, C, rows)

# 4. loop permutation: ii outside ki, so A[i, k] is reused across a row of the tile
A, B, k, _, C = declare()
s = te.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ii, ki, ji)
s[C].vectorize(ji)
measure("loop permutation", s, A, B, C, rows)

# 5. array packing: B re-laid out as [N/bn, K, bn] so the inner loop reads it contiguously
A, B, k, packedB, C = declare(packed=True)
s = te.create_schedule(C.op)
io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], bn, bn)
ko, ki = s[C].split(k, factor=4)
s[C].reorder(io, jo, ko, ii, ki, ji)
s[C].vectorize(ji)
x, y, z = s[packedB].op.axis
s[packedB].vectorize(z)
measure("array packing", s, A, B, C, rows)

# 6. write cache: accumulate a block in a local buffer (registers), write it out once
A, B, k, packedB, C = declare(packed=True)
s = te.create_schedule(C.op)
CC = s.cache_write(C, "local")
io, jo, ii, ji = s[C].tile(s[C].op.axis[0], s[C].op.axis[1], 8, bn)
s[CC].compute_at(s[C], jo)
ci, cj = s[CC].op.axis
(ck,) = s[CC].op.reduce_axis
ko, ki = s[CC].split(ck, factor=4)
s[CC].reorder(ko, ki, ci, cj)
s[CC].unroll(ki)
s[CC].unroll(ci)
s[CC].vectorize(cj)
s[C].vectorize(ji)
x, y, z = s[packedB].op.axis
s[packedB].vectorize(z)
measure("write cache", s, A, B, C, rows)

# 7. parallel: row blocks (and the packing) on every core (steps 1-6 had one)
s[C].parallel(io)
s[packedB].parallel(x)
measure(f"parallel ({num_threads()} thr)", s, A, B, C, rows)
if rows[-1][1] < rows[-2][1]:
    print(
        "  (slower than one core here: starting and joining the threads costs more than the\n"
        "   split work saves at this size, or another process holds a core: each step waits\n"
        "   for its slowest thread. At N=1024 on an idle machine it scales with the cores.)"
    )

print("\nIR of the final step:")
print(tf.lower(s, [A, B, C]))
theirs = numpy_gflops()  # after all of ours (see the docstring)
print(f"\nnumpy (OpenBLAS, all its threads, warm): {theirs:.1f} GFLOP/s")
print(f"{'step':<20} {'GFLOP/s':>8} {'vs numpy':>8}")
for title, ours in rows:
    print(f"{title:<20} {ours:8.1f} {ours / theirs:8.2f}")
