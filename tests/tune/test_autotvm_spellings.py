"""The AutoTVM tutorial's tuning script, spelled as AutoTVM spells it, end to end."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.tune.measure import MeasureErrorNo


@tune.template("test/autotvm_matmul")
def autotvm_matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    k = s[C].op.reduce_axis[0]
    cfg = tune.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    return s, [A, B, C]


def test_autotvm_spelled_script_tunes_and_applies(tmp_path):
    N, L, M = 24, 17, 40
    task = tune.task.create("test/autotvm_matmul", args=(N, L, M, "float32"), target="llvm")
    option = tune.measure_option(builder="local", runner=tune.LocalRunner(number=2, repeat=1))
    log = str(tmp_path / "matmul.log")
    tuner = tune.tuner.RandomTuner(task, seed=0)
    tuner.tune(n_trial=8, measure_option=option, callbacks=[tune.callback.log_to_file(log)])
    records = tune.load_records(log)
    assert len(records) == 8
    errors = [r.result.error_msg for r in records if r.result.error_no != MeasureErrorNo.NO_ERROR]
    assert not errors, errors[0]
    with tune.apply_history_best(log):
        with tf.Target("llvm"):
            s, arg_bufs = autotvm_matmul(N, L, M, "float32")
            func = tf.build(s, arg_bufs)
    best = min(records, key=lambda r: r.cost)
    assert f"{best.config}" and tuner.best_config is not None
    rng = np.random.default_rng(0)
    a = rng.uniform(size=(N, L)).astype("float32")
    b = rng.uniform(size=(L, M)).astype("float32")
    c = tf.nd.empty((N, M), "float32")
    func(tf.nd.array(a), tf.nd.array(b), c)
    tf.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_measure_option_reads_builder_and_runner():
    option = tune.measure_option(
        builder=tune.LocalBuilder(timeout=4, n_parallel=2),
        runner=tune.LocalRunner(number=7, repeat=2, min_repeat_ms=5, timeout=3),
    )
    assert (option.number, option.repeat, option.min_repeat_ms) == (7, 2, 5)
    assert option.timeout == 4 and option.n_parallel == 2
    assert option.builder is None and option.runner is None  # the default steps
    # an argument given to measure_option wins over the runner's
    assert tune.measure_option(number=3, runner=tune.LocalRunner(number=7)).number == 3
    assert tune.LocalRunner(20, 9).timeout == 20  # TVM's positional order: timeout first
    assert tune.measure_option(runner="local").number == 5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"builder": "rpc"}, "builder='rpc' is not known"),
        ({"runner": 3}, "runner must be 'local'"),
    ],
)
def test_measure_option_refuses_unknown_builders(kwargs, message):
    with pytest.raises(tune.TuneError, match=message):
        tune.measure_option(**kwargs)


def test_local_builder_refuses_other_build_funcs():
    with pytest.raises(tune.TuneError, match="build_func='ndk' is not provided"):
        tune.LocalBuilder(build_func="ndk")
