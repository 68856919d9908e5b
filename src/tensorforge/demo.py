"""`tensorforge demo`: the whole journey on this CPU in one minute, beside NumPy."""

from __future__ import annotations

import tempfile
import time

import numpy as np

import tensorforge as tf
from tensorforge import tune
from tensorforge.ops import fused_chain, matmul_template, schedule_elementwise
from tensorforge.runtime.native_call import num_threads

# How every tensorforge kernel here is timed, in the tuner's worker processes and in this one
# alike: a warm-up call, then `repeat` measurements of at least MIN_REPEAT_MS each.
NUMBER, REPEAT, MIN_REPEAT_MS = 1, 3, 50


def _median_seconds(fn, repeat: int = REPEAT, min_repeat_ms: float = MIN_REPEAT_MS) -> float:
    """NumPy timed warm, the way time_evaluator times ours: one warm-up call, then the median
    of `repeat` measurements, each of as many calls as last `min_repeat_ms`."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    number = max(1, int(min_repeat_ms / 1e3 / once) + 1)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return float(np.median(times))


def _tune(task, trials: int, log: str) -> None:
    """Trial 1 is the default config (the operator's heuristics); the rest search the space."""
    option = tune.measure_option(
        number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS, timeout=20
    )
    callbacks = [tune.log_to_file(log), tune.progress_bar()]
    tune.GridSearchTuner(task).tune(1, option, callbacks=callbacks)  # config 0: the default
    tuner = tune.XGBTuner(task, seed=0) if _has_xgboost() else tune.RandomTuner(task, seed=0)
    tuner.load_history(log)
    tuner.tune(trials - 1, option, callbacks=[tune.log_to_file(log), tune.progress_bar()])


def run_demo(size: int = 512, trials: int = 16) -> int:
    target = tf.Target("llvm")
    dev = tf.cpu(0)
    rng = np.random.default_rng(0)
    threads = num_threads()
    print(f"tensorforge {tf.__version__} on {target.mcpu} ({target.vector_bits}-bit vectors)\n")

    # 1. matmul: the operator's template (tensorforge.ops), tuned briefly; then its best config
    args = (size, size, size, "float32")
    task = tune.create_task(matmul_template, args=args, target=target)
    print(f"== matmul {size}x{size}x{size} float32: tuning {trials} trials ==")
    print(f"template {task.name}: {len(task.config_space)} configs; trial 1 is its default")
    with tempfile.TemporaryDirectory() as tmp:
        log = f"{tmp}/demo.jsonl"
        _tune(task, max(trials, 1), log)
        best = min((r for r in tune.load_records(log) if r.result.ok), key=lambda r: r.cost)
        with tune.apply_history_best(log), target:
            s, tensors = matmul_template(*args)
    flops = 2.0 * size**3
    print(f"\nbest config: {best.config['knobs']}")
    print("lowered IR of the best schedule:")
    print(tf.lower(s, tensors))
    mod = tf.build(s, tensors, target=target)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    A, B, C = tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.empty((size, size), "float32", dev)
    mod(A, B, C)
    np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-3, atol=1e-3)
    # NOTE: ours is timed before numpy's matmul first runs: OpenBLAS's threads keep spinning for
    # a while after a call and took a core from our kernel (it measured 0.3-0.7x numpy so)
    timer = mod.time_evaluator(
        mod.entry_name, dev, number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS
    )
    ours = timer(A, B, C).median
    theirs = _median_seconds(lambda: a @ b)
    print(
        f"matmul, best config: tuning measured {flops / best.cost / 1e9:.1f} GFLOP/s (in a worker "
        f"process); built here {flops / ours / 1e9:.1f} GFLOP/s (same timing: warm-up, median of "
        f"{REPEAT} runs of >= {MIN_REPEAT_MS} ms)"
    )
    print(
        f"matmul: tensorforge {flops / ours / 1e9:8.1f} GFLOP/s   numpy {flops / theirs / 1e9:8.1f} "
        f"GFLOP/s (warm)   ratio {theirs / ours:.2f}x" + f"   ({threads} threads)"
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
    ours = mod.time_evaluator(
        mod.entry_name, dev, number=NUMBER, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS
    )(X, Y).median
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
