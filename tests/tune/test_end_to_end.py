"""Tuning real kernels: the compiler builds and runs each candidate in its own process."""

import argparse
import importlib.util
import os
import textwrap

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.tune import cli
from tensorforge.tune.measure import MeasureErrorNo


@tune.template("test/e2e_matmul")
def e2e_matmul(N, L, M):
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = tune.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2, policy="power2")
    cfg.define_knob("vec", [0, 1])
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    if cfg["vec"].val:
        s[C].vectorize(xi)
    return s, [A, B, C]


@tune.template("test/e2e_faults")
def e2e_faults(n):
    """One knob, one misbehaviour per value, found in the kernel itself where it can be."""
    import time

    cfg = tune.get_config()
    cfg.define_knob("mode", ["ok", "wrong", "oob", "raise", "hang"])
    mode = cfg["mode"].val
    if mode == "raise":
        raise RuntimeError("no schedule for this config")
    if mode == "hang":
        time.sleep(3600)
    A = te.placeholder((n,), name="A")
    if mode == "wrong":
        B = te.compute((n,), lambda i: A[i] * 3.0, name="B")
    elif mode == "oob":  # reads far outside A (data-dependent: only running finds out): SIGSEGV
        B = te.compute((n,), lambda i: A[(A[i] * 1.0e9).astype("int32")], name="B")
    else:
        B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    return te.create_schedule(B.op), [A, B]


def test_tune_apply_and_run(tmp_path):
    log = tmp_path / "matmul.jsonl"
    task = tune.create_task("test/e2e_matmul", (64, 64, 64), "llvm")
    assert task.flop == 2 * 64**3
    has_xgboost = importlib.util.find_spec("xgboost") is not None
    if has_xgboost:
        tuner = tune.XGBTuner(task, plan_size=8, n_candidates=64, seed=0)
    else:
        tuner = tune.RandomTuner(task, seed=0)
    option = tune.measure_option(number=2, repeat=2, timeout=30, check_correctness=True)
    tuner.tune(16, option, callbacks=[tune.log_to_file(log)])
    records = tune.load_records(log)
    assert len(records) == 16
    failures = [r.result.error_msg for r in records if not r.result.ok]
    assert not failures, failures[:1]
    if has_xgboost:  # the model learned from IR features reported by the build processes
        measured = [c.index for c, _ in tuner.history]
        assert all(np.isfinite(tuner._features[i]).all() for i in measured)
        assert tuner.model.trained

    with tune.apply_history_best(log) as ctx, tf.Target("llvm"):
        s, args = e2e_matmul(64, 64, 64)
        mod = tf.build(s, args)
    assert ctx.applied and ctx.applied[0][1].config == tuner.best_config.to_json()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype("float32")
    b = rng.standard_normal((64, 64)).astype("float32")
    dev = tf.cpu(0)
    c = tf.nd.array(np.zeros((64, 64), "float32"), dev)
    mod(tf.nd.array(a, dev), tf.nd.array(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_faulty_kernels_are_recorded():
    task = tune.create_task("test/e2e_faults", (64,), "llvm")
    tuner = tune.GridSearchTuner(task)
    option = tune.measure_option(number=1, repeat=1, timeout=4, check_correctness=True)
    tuner.tune(5, option)
    errors = {c["mode"].val: r.error_no for c, r in tuner.history}
    assert errors == {
        "ok": MeasureErrorNo.NO_ERROR,
        "wrong": MeasureErrorNo.WRONG_ANSWER,
        "oob": MeasureErrorNo.CRASH,
        "raise": MeasureErrorNo.INSTANTIATION_ERROR,
        "hang": MeasureErrorNo.BUILD_TIMEOUT,
    }


def test_cli_tune_builtin_and_log_show(tmp_path, capsys):
    log = tmp_path / "mm.jsonl"
    argv = [
        "matmul",
        "--shape",
        "64",
        "64",
        "64",
        "--trials",
        "4",
        "--log",
        str(log),
        "--seed",
        "1",
        "--tuner",
        "random",
        "--number",
        "1",
        "--repeat",
        "1",
        "--no-progress",
    ]
    assert cli.tune_main(argv) == 0
    out = capsys.readouterr().out
    assert "builtin/matmul" in out and "best:" in out and "GFLOP/s" in out
    assert len(tune.load_records(log)) == 4
    argv[argv.index("--trials") + 1] = "8"  # --trials is the total: the log's 4 count toward it
    assert cli.tune_main(argv) == 0  # resumes: 4 more, none repeated
    assert "resuming: 4 trials" in capsys.readouterr().out
    indices = [r.config["index"] for r in tune.load_records(log)]
    assert len(indices) == 8 and len(set(indices)) == 8

    assert cli.log_show_main([str(log), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "builtin/matmul" in out and "GFLOP/s" in out and "knobs" in out
    plot = tmp_path / "curve.png"
    if _has("matplotlib"):
        assert cli.log_show_main([str(log), "--plot", str(plot)]) == 0
        assert plot.exists() and plot.stat().st_size > 1000
    else:  # says how to get it
        assert cli.log_show_main([str(log), "--plot", str(plot)]) == 2
        assert "matplotlib" in capsys.readouterr().err


def test_cli_tune_template_file(tmp_path, capsys):
    source = tmp_path / "my_ops.py"
    source.write_text(
        textwrap.dedent(
            """
        from tensorforge import te, tune

        @tune.template("my/scale")
        def scale(n):
            A = te.placeholder((n,), name="A")
            B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
            s = te.create_schedule(B.op)
            cfg = tune.get_config()
            cfg.define_split("t", B.op.axis[0], num_outputs=2)
            cfg["t"].apply(s, B, B.op.axis[0])
            return s, [A, B]
        """
        )
    )
    log = tmp_path / "scale.jsonl"
    argv = [
        "--template",
        f"{source}:scale",
        "--args",
        "[256]",
        "--trials",
        "3",
        "--log",
        str(log),
        "--tuner",
        "grid",
        "--number",
        "1",
        "--repeat",
        "1",
        "--no-progress",
    ]
    assert cli.tune_main(argv) == 0
    assert [r.template for r in tune.load_records(log)] == ["my/scale"] * 3
    assert cli.tune_main(["--template", f"{source}:nope", "--trials", "1"]) == 2
    assert "no template 'nope'" in capsys.readouterr().err


def _has(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


@pytest.mark.skipif(
    not os.path.exists(
        os.path.join(os.path.dirname(__file__), "..", "..", "tutorials", "06_autotune_matmul.py")
    ),
    reason="tutorial missing",
)
def test_tutorial_runs_small(tmp_path):
    import subprocess
    import sys

    path = os.path.join(os.path.dirname(__file__), "..", "..", "tutorials", "06_autotune_matmul.py")
    env = {**os.environ, "TF_TUTORIAL_SMALL": "1"}
    proc = subprocess.run(
        [sys.executable, path], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "numpy" in proc.stdout and "tuned" in proc.stdout


def test_cli_gpu_builtins_default_to_cuda_and_need_a_device_or_ray(monkeypatch, capsys):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pycuda" else real_find_spec(name, *a),
    )
    for op in ("matmul_cuda", "gemm_tensorcore"):
        assert cli.tune_main([op, "--trials", "2", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert "cuda target is measured on a GPU" in err and "--ray ADDRESS" in err, err
    # a CPU target is not affected, and --ray sends the measuring elsewhere
    assert cli.missing_local_device("llvm", argparse.Namespace(ray=None)) is None
    assert cli.missing_local_device("cuda", argparse.Namespace(ray="auto")) is None
