"""Tutorial 8: auto-schedule a fused matmul + bias + GELU, with no template.

Tutorial 6 searched the knobs of a template someone wrote. Here nobody writes a schedule: we
declare only the computation, and `tune.auto` derives the schedules it admits from it (inline
the element-wise stages, tile the matmul in several levels with the GELU fused into its outer
loops, pack the B panel, vectorize, unroll, parallelize), takes a first guess from a model of
this CPU without measuring anything, then searches from there. The schedule found is a list of
ordinary primitive calls: printed, it is Python you can read, edit and paste.

    python tutorials/08_auto_schedule.py            # 512x512x512, 32 trials (a few minutes)
    python tutorials/08_auto_schedule.py --small    # 64x64x64, 8 trials (seconds)
"""

import os
import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.tune import auto

SMALL = "--small" in sys.argv or os.environ.get("TF_TUTORIAL_SMALL") == "1"
N = 64 if SMALL else 512
TRIALS = 8 if SMALL else 32
LOG = "08_auto_schedule.jsonl"


# 1. The computation: inputs and outputs, nothing about loops.
@auto.register_workload
def matmul_gelu(N, K, M, dtype):
    A = te.placeholder((N, K), name="A", dtype=dtype)
    B = te.placeholder((K, M), name="B", dtype=dtype)
    bias = te.placeholder((M,), name="bias", dtype=dtype)
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((N, M), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute((N, M), lambda i, j: 0.5 * D[i, j] * (1 + te.erf(D[i, j] * 0.7071)), name="E")
    return [A, B, bias, E]


def run(s, args, arrays):
    mod = tf.build(s, args)
    out = tf.nd.empty((N, N), "float32", tf.cpu(0))
    mod(*arrays, out)
    seconds = mod.time_evaluator(mod.entry_name, tf.cpu(0), number=3, repeat=3)(*arrays, out).median
    return out.numpy(), seconds


def main():
    task = auto.SearchTask(func=matmul_gelu, args=(N, N, N, "float32"), target="llvm")
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (N, N)).astype("float32"), rng.uniform(-1, 1, (N, N)).astype("f4")
    bias = rng.uniform(-1, 1, N).astype("float32")
    d = a.astype(np.float64) @ b + bias
    from math import erf

    expected = 0.5 * d * (1 + np.vectorize(erf)(d * 0.7071))
    arrays = [tf.nd.array(x) for x in (a, b, bias)]

    # 2. The first guess: the rules, with every decision taken by a model of the target (its
    #    vector width and registers, the L1/L2 of its ISA's cores, the threads): ops/matmul's
    #    micro-kernel shape here. No measurement, well under a second. The torch.compile backend
    #    takes it for every kernel with no tuning record (options={"schedule": "auto"}, the
    #    default; its report names each kernel's schedule source).
    start = time.perf_counter()
    s0, args = task.default_schedule()
    print(f"first guess in {time.perf_counter() - start:.2f} s")
    got, guess_s = run(s0, args, arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)

    # 3. The search: evolution over the rules' decisions, ranked by a learned cost model, each
    #    candidate measured in its own process. The log is resumable: run the script again and
    #    it continues where it stopped (Ctrl-C included).
    option = tune.measure_option(number=2, repeat=2, timeout=30)
    task.tune(trials=TRIALS, log=LOG, seed=0, measure_option=option)

    # 4. The best schedule, replayed on a fresh schedule; and printed as the Python that makes it.
    s, args = task.apply_best(LOG)
    got, tuned_s = run(s, args, arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)
    print(task.print_best(LOG))
    flop = 2 * N**3
    print(f"first guess: {flop / guess_s / 1e9:.1f} GFLOP/s; tuned: {flop / tuned_s / 1e9:.1f}")


if __name__ == "__main__":
    main()
