"""float32 matmul 512^3: naive schedule vs. split/reorder/vectorize/parallel vs. numpy (same run).

Run: python benchmarks/matmul_512.py [--json]
"""

import json
import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te

N = 512


def declare():
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, k, C


def naive():
    A, B, k, C = declare()
    return te.create_schedule(C.op), [A, B, C]


def tuned_by_hand():
    A, B, k, C = declare()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 32, 32)
    ko, ki = s[C].split(k, factor=4)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    return s, [A, B, C]


def main() -> None:
    dev = tf.cpu(0)
    rng = np.random.default_rng(0)
    a_np = rng.uniform(-1, 1, (N, N)).astype("float32")
    b_np = rng.uniform(-1, 1, (N, N)).astype("float32")
    a, b = tf.nd.array(a_np), tf.nd.array(b_np)
    flops = 2.0 * N**3
    rows = []
    for name, make in [("naive", naive), ("split/reorder/vectorize/parallel", tuned_by_hand)]:
        s, args = make()
        t0 = time.perf_counter()
        mod = tf.build(s, args)
        build_s = time.perf_counter() - t0
        c = tf.nd.empty((N, N), "float32", dev)
        mod(a, b, c)
        np.testing.assert_allclose(c.numpy(), a_np @ b_np, rtol=1e-3, atol=1e-3)
        secs = mod.time_evaluator(mod.entry_name, dev, number=3, repeat=5)(a, b, c).median
        rows.append(
            {"case": name, "seconds": secs, "gflops": flops / secs / 1e9, "build_s": build_s}
        )
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        a_np @ b_np
        times.append(time.perf_counter() - t0)
    secs = float(np.median(times))
    rows.append(
        {"case": "numpy (OpenBLAS)", "seconds": secs, "gflops": flops / secs / 1e9, "build_s": 0.0}
    )
    ref = rows[-1]["gflops"]
    if "--json" in sys.argv:
        for r in rows:
            print(json.dumps(r))
    print(f"\nfloat32 matmul {N}^3, {tf.Target('llvm').mcpu}")
    print(f"{'schedule':<34} {'GFLOP/s':>9} {'vs numpy':>9} {'build (s)':>10}")
    for r in rows:
        print(f"{r['case']:<34} {r['gflops']:9.1f} {r['gflops'] / ref:9.2f} {r['build_s']:10.3f}")


if __name__ == "__main__":
    main()
