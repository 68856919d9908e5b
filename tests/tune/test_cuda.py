"""Tuning a CUDA kernel on the GPU (skipped where there is none)."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import tune
from tensorforge.tune.measure import MeasureErrorNo


@pytest.mark.cuda
def test_cuda_matmul_tunes_correct_and_faster_than_default(tmp_path):
    n = 256
    task = tune.create_task("builtin/matmul_cuda", [n, n, n, "float32"], "cuda")
    assert task.target.startswith("cuda -arch=sm_")
    log = tmp_path / "cuda.jsonl"
    try:
        tuner = tune.XGBTuner(task, plan_size=8, seed=0)
    except tune.TuneError:
        tuner = tune.RandomTuner(task, seed=0)
    # this test process may have initialized CUDA already: candidates start from a clean server
    option = tune.measure_option(number=5, repeat=2, timeout=30, check_correctness=True)
    # the default config (the ops schedule) is trial 1, so the best found is at least as good
    tune.GridSearchTuner(task).tune(1, option, callbacks=[tune.log_to_file(log)])
    tuner.load_history(str(log))
    tuner.tune(15, option, callbacks=[tune.log_to_file(log)])
    records = tune.load_records(log)
    assert len(records) == 16
    assert sum(r.result.ok for r in records) >= 8, [
        r.result.error_msg for r in records if not r.result.ok
    ][:2]
    assert not any(r.result.error_no == MeasureErrorNo.WRONG_ANSWER for r in records)

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype("float32")
    b = rng.standard_normal((n, n)).astype("float32")
    dev = tf.cuda(0)
    a_dev, b_dev = tf.nd.array(a, dev), tf.nd.array(b, dev)
    times = {}
    for name in ("default", "tuned"):
        with tf.Target(task.target):
            if name == "tuned":
                with tune.apply_history_best(log):
                    s, args = task.template(n, n, n, "float32")
            else:
                s, args = task.template(n, n, n, "float32")
            mod = tf.build(s, args, target=task.target)
        c = tf.nd.empty((n, n), "float32", dev)
        mod(a_dev, b_dev, c)
        np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-3, atol=1e-3)
        times[name] = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=3)(
            a_dev, b_dev, c
        ).median
    assert times["tuned"] < times["default"] * 1.15  # the default was a candidate: noise only
