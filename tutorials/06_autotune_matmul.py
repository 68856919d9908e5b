"""Tutorial 6: autotune a matrix multiplication.

A schedule has numbers in it (tile sizes, which loop to unroll) whose best values depend on the
machine. Instead of guessing, we write a *template*: a schedule whose numbers are knobs, and let
the tuner search the knobs' space, measuring each candidate. Then we build with the best config
found and compare it with the default config and with numpy.

    python tutorials/06_autotune_matmul.py            # 512x512x512, 64 trials (a few minutes)
    python tutorials/06_autotune_matmul.py --small    # 64x64x64, 8 trials (seconds)
"""

import os
import sys
import time

import numpy as np

import tensorforge as tf
from tensorforge import te, tune

SMALL = "--small" in sys.argv or os.environ.get("TF_TUTORIAL_SMALL") == "1"
N = 64 if SMALL else 512
TRIALS = 8 if SMALL else 64
LOG = "06_autotune_matmul.jsonl"


# 1. The template. It builds the computation, then reads each decision from `tune.get_config()`.
#    While the tuner defines the space, each knob reads as its first value; when it measures a
#    candidate, the knobs read that candidate's choices.
@tune.template("tutorial/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis

    cfg = tune.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)  # y -> yo, yi with yi dividing N
    cfg.define_split("tile_x", x, num_outputs=2, max_factor=64)
    cfg.define_split("tile_k", k, num_outputs=2)
    cfg.define_knob("unroll", [0, 1])

    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    s[C].reorder(yo, xo, ko, ki, yi, xi)
    if cfg["tile_x"].size[-1] > 1:
        s[C].vectorize(xi)  # the inner columns become one vector
    if cfg["unroll"].val and cfg["tile_y"].size[-1] > 1:
        s[C].unroll(yi)  # several rows of C accumulate at once
    return s, [A, B, C]


def gflops(seconds):
    return 2 * N**3 / seconds / 1e9


def main():
    # 2. A task binds the template to its arguments and a target; the space is printable.
    task = tune.create_task("tutorial/matmul", args=(N, N, N, "float32"), target="llvm")
    print(task.config_space)

    # 3. Tune. XGBTuner ranks random candidates with a cost model learned from the lowered loop
    #    IR of what it has measured so far; without xgboost installed, search at random.
    try:
        tuner = tune.XGBTuner(task, plan_size=8 if SMALL else 32, seed=0)
    except tune.TuneError as e:
        print(f"({e}; using RandomTuner)")
        tuner = tune.RandomTuner(task, seed=0)
    if os.path.exists(LOG):
        os.remove(LOG)  # start afresh (tuner.load_history(LOG) would resume instead)
    start = time.perf_counter()
    tuner.tune(
        n_trial=TRIALS,
        measure_option=tune.measure_option(number=3 if SMALL else 5, repeat=3, timeout=10),
        callbacks=[tune.log_to_file(LOG), tune.progress_bar()],
    )
    print(
        f"tuned {TRIALS} trials in {time.perf_counter() - start:.1f} s; best config {tuner.best_config}"
    )

    # 4. Apply the best config: inside apply_history_best, calling the template picks the best
    #    logged config for this workload and target (and warns if there is none).
    with tune.apply_history_best(LOG), tf.Target("llvm"):
        s, args = matmul(N, N, N, "float32")
        tuned = tf.build(s, args)
    s, args = matmul(N, N, N, "float32")  # outside: the default config
    default = tf.build(s, args)

    # 5. Check and compare with numpy.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N)).astype("float32")
    b = rng.standard_normal((N, N)).astype("float32")
    dev = tf.cpu(0)
    a_dev, b_dev = tf.nd.array(a, dev), tf.nd.array(b, dev)
    rows = []
    for name, mod in (("default config", default), ("tuned", tuned)):
        c = tf.nd.empty((N, N), "float32", dev)
        mod(a_dev, b_dev, c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-3, atol=1e-3)
        seconds = mod.time_evaluator(mod.entry_name, dev, number=5, repeat=3)(
            a_dev, b_dev, c
        ).median
        rows.append((name, seconds))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(5):
            a @ b
        times.append((time.perf_counter() - t0) / 5)
    rows.append(("numpy (OpenBLAS)", float(np.median(times))))

    print(f"\nfloat32 matmul {N}x{N}x{N}")
    for name, seconds in rows:
        print(f"  {name:18s} {seconds * 1e3:9.3f} ms  {gflops(seconds):8.2f} GFLOP/s")
    print(
        f"  tuned vs default: {rows[0][1] / rows[1][1]:.1f}x faster; tuned vs numpy: {rows[2][1] / rows[1][1]:.2f}x"
    )


if __name__ == "__main__":
    main()
