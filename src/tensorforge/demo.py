"""`tensorforge demo`: the whole journey on this CPU in one minute, beside NumPy."""

from __future__ import annotations

import tempfile
import time

import numpy as np

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.ops import fused_chain, schedule_elementwise


@tune.template("demo/matmul")
def demo_matmul(n: int, dtype: str = "float32"):
    """A tunable matmul: register tile sizes and the k unroll are knobs."""
    A = te.placeholder((n, n), dtype=dtype, name="A")
    B = te.placeholder((n, n), dtype=dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    cfg = tune.get_config()
    i, j = s[C].op.axis
    cfg.define_split("tile_i", i, num_outputs=2, policy="power2", max_factor=16)
    cfg.define_split("tile_j", j, num_outputs=2, policy="power2", max_factor=64)
    cfg.define_knob("k_unroll", [1, 4])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = cfg["tile_i"].apply(s, C, i)
    jo, ji = cfg["tile_j"].apply(s, C, j)
    s[C].reorder(io, jo, ii, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=cfg["k_unroll"].val)
    s[CC].reorder(ko, ki, ci, cj)
    s[CC].unroll(ki)
    s[CC].vectorize(cj)
    return s, [A, B, C]


def _median_seconds(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def run_demo(size: int = 512, trials: int = 16) -> int:
    target = tf.Target("llvm")
    dev = tf.cpu(0)
    rng = np.random.default_rng(0)
    print(f"tensorforge {tf.__version__} on {target.mcpu} ({target.vector_bits}-bit vectors)\n")

    # 1. matmul: tune briefly, then build the best config
    print(f"== matmul {size}x{size}x{size} float32: tuning {trials} trials ==")
    task = tune.create_task("demo/matmul", args=(size, "float32"), target=target)
    print(f"config space: {len(task.config_space)} configs")
    with tempfile.TemporaryDirectory() as tmp:
        log = f"{tmp}/demo.jsonl"
        tuner = tune.XGBTuner(task, seed=0) if _has_xgboost() else tune.RandomTuner(task, seed=0)
        tuner.tune(
            n_trial=trials,
            measure_option=tune.measure_option(number=2, repeat=1, timeout=20),
            callbacks=[tune.log_to_file(log), tune.progress_bar()],
        )
        with tune.apply_history_best(log):
            with target:
                s, args = demo_matmul(size, "float32")
    print("\nlowered IR of the best schedule:")
    print(tf.lower(s, args))
    mod = tf.build(s, args, target=target)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    A, B, C = tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.empty((size, size), "float32", dev)
    # NOTE: ours is timed before numpy's matmul first runs: OpenBLAS's threads keep spinning for
    # a while after a call and took a core from our kernel (it measured 0.3-0.7x numpy so)
    ours = mod.time_evaluator(mod.entry_name, dev, number=3, repeat=3)(A, B, C).median
    np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-3, atol=1e-3)
    theirs = _median_seconds(lambda: a @ b)
    flops = 2.0 * size**3
    print(
        f"matmul: tensorforge {flops / ours / 1e9:8.1f} GFLOP/s   numpy {flops / theirs / 1e9:8.1f} GFLOP/s"
        f"   ratio {theirs / ours:.2f}x"
    )

    # 2. a fused element-wise chain
    n = 2048
    print(f"\n== y = sigmoid(relu(x) * 2 + 1) on {n}x{n}: four stages fused into one loop ==")
    x, y = fused_chain(n, n)
    s = schedule_elementwise(y, target)
    print(tf.lower(s, [x, y]))
    mod = tf.build(s, [x, y], target=target)
    xa = rng.standard_normal((n, n)).astype("float32")
    X, Y = tf.nd.array(xa, dev), tf.nd.empty((n, n), "float32", dev)
    mod(X, Y)
    expected = 1 / (1 + np.exp(-(np.maximum(xa, 0) * 2 + 1)))
    np.testing.assert_allclose(Y.numpy(), expected, rtol=1e-5, atol=1e-6)
    ours = mod.time_evaluator(mod.entry_name, dev, number=5, repeat=3)(X, Y).median
    theirs = _median_seconds(lambda: 1 / (1 + np.exp(-(np.maximum(xa, 0) * 2 + 1))))
    moved = 2 * xa.nbytes
    print(
        f"element-wise: tensorforge {moved / ours / 1e9:6.2f} GB/s   numpy {moved / theirs / 1e9:6.2f} GB/s"
        f"   ratio {theirs / ours:.1f}x"
    )
    print("\nboth kernels match numpy.")
    return 0


def _has_xgboost() -> bool:
    try:
        import xgboost  # noqa: F401

        return True
    except ImportError:
        return False
