"""Tuning on a real Ray cluster: a head node and a second node process on loopback.

The head offers no measurement resource; the second node offers this machine's target, so every
measurement must land there. Covers records from a cluster run, a killed measurement worker, a
killed driver then resume, a node joining mid-run, and a target no node offers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import tensorforge as tf  # noqa: E402
from tensorforge import te, tune  # noqa: E402
from tensorforge.tune.ray_remote import target_resource  # noqa: E402
from tensorforge.tune.records import load_records  # noqa: E402

SIZE = (24, 40, 17)  # awkward extents: every config must still be correct


@tune.template("test/ray_matmul")
def ray_matmul(N, L, M):
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = tune.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, k, yi, xi)
    return s, [A, B, C]


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    target = tune.create_task("test/ray_matmul", SIZE, "llvm").target
    cl = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cl.add_node(num_cpus=1, resources={target_resource(target): 1})
    ray.init(address=cl.address, logging_level="WARNING", log_to_driver=False)
    cl.wait_for_nodes()
    yield cl, worker.node_id, target
    ray.shutdown()
    cl.shutdown()


def _runner(cl):
    return tune.RayRunner(address=cl.address, top_k=3, confirm_rounds=2, max_repeat=4)


def _option(runner):
    return tune.measure_option(number=2, repeat=2, timeout=30, runner=runner)


def test_cluster_run_records_land_on_the_node_with_the_device(cluster, tmp_path):
    cl, device_node, target = cluster
    log = tmp_path / "ray.jsonl"
    task = tune.create_task("test/ray_matmul", SIZE, "llvm")
    tuner = tune.RandomTuner(task, seed=3)
    tuner.tune(6, _option(_runner(cl)), callbacks=[tune.log_to_file(log)])

    records = load_records(log)
    trials = [r for r in records if not r.result.meta.get("confirmed")]
    confirmed = [r for r in records if r.result.meta.get("confirmed")]
    assert len(trials) == 6 and all(r.result.ok for r in trials), [r.result for r in trials]
    assert len({json.dumps(r.config, sort_keys=True) for r in trials}) == 6
    assert len(confirmed) == 3  # the top 3, re-measured side by side
    for rec in records:
        meta = rec.result.meta
        assert meta["node_id"] == device_node  # the head offers no device: never measured there
        assert meta["device"] and "host" in meta
        assert rec.target == target
    assert all(r.result.meta["cv"] is not None for r in trials)
    assert tuner.best_result.meta.get("confirmed")

    with tune.apply_history_best(str(log)), tf.Target(target):
        s, args = ray_matmul(*SIZE)
        mod = tf.build(s, args)
    rng = np.random.default_rng(7)
    a = rng.standard_normal(SIZE[:2]).astype("float32")
    b = rng.standard_normal(SIZE[1:]).astype("float32")
    c = np.empty((SIZE[0], SIZE[2]), "float32")
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_killed_measurement_worker_costs_a_retry_not_the_run(cluster):
    cl, _, _ = cluster
    task = tune.create_task("test/ray_matmul", SIZE, "llvm")
    option = _option(_runner(cl))
    measurer = option.runner.create_measurer(task, option, None)
    try:
        pid = measurer.actor_locations()[0]["pid"]
        killed = []

        def kill_after_first(position, result):
            if not killed:
                os.kill(pid, signal.SIGKILL)
                killed.append(position)

        configs = [task.config_space.get(i) for i in (0, 5, 9)]
        results = measurer.measure(configs, kill_after_first)
    finally:
        measurer.close()
    assert killed
    assert all(r.ok for r in results), [r.error_msg for r in results]
    assert any(r.meta.get("attempts") == 2 for r in results)  # one ran again on a new worker
    assert {r.meta["worker_pid"] for r in results} - {pid}  # ... which is not the killed one


DRIVER = """
import sys
from tensorforge import tune
sys.path.insert(0, {tests!r})
from tune.test_ray import SIZE  # registers the template
task = tune.create_task("test/ray_matmul", SIZE, "llvm")
tuner = tune.RandomTuner(task, seed=11)
done = tuner.load_history({log!r}) if __import__("os").path.exists({log!r}) else 0
runner = tune.RayRunner(address={address!r}, top_k=0, max_repeat=3)
tuner.batch_size = 2
tuner.tune({total} - done, tune.measure_option(number=2, repeat=2, timeout=30, runner=runner),
           callbacks=[tune.log_to_file({log!r})])
print("finished", done)
"""


def test_a_killed_driver_leaves_a_valid_log_that_resumes(cluster, tmp_path):
    cl, _, _ = cluster
    log = tmp_path / "driver.jsonl"
    total = 8
    tests_dir = str(Path(__file__).resolve().parents[1])
    script = textwrap.dedent(
        DRIVER.format(tests=tests_dir, log=str(log), address=cl.address, total=total)
    )
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = load_records(log)  # every line that landed parses
    assert 1 <= len(partial) < total

    finished = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert finished.returncode == 0, finished.stderr[-2000:]
    records = load_records(log)
    configs = [json.dumps(r.config, sort_keys=True) for r in records]
    assert len(configs) == total and len(set(configs)) == total  # nothing measured twice


def test_a_node_that_joins_mid_run_gets_a_measurement_worker(cluster):
    cl, _, target = cluster
    task = tune.create_task("test/ray_matmul", SIZE, "llvm")
    option = _option(_runner(cl))
    measurer = option.runner.create_measurer(task, option, None)
    node = cl.add_node(num_cpus=1, resources={target_resource(target): 1})
    try:
        cl.wait_for_nodes()
        results = measurer.measure([task.config_space.get(i) for i in range(4)])
        assert all(r.ok for r in results)
        nodes = {where["node_id"] for where in measurer.actor_locations()}
        assert node.node_id in nodes and len(nodes) == 2
    finally:
        measurer.close()
        cl.remove_node(node)


def test_a_target_no_node_offers_is_refused_with_the_resource_named(cluster):
    cl, _, _ = cluster
    task = tune.create_task("test/ray_matmul", SIZE, "llvm -mcpu=haswell")
    option = _option(_runner(cl))
    with pytest.raises(tune.TuneError, match="offers the resource"):
        option.runner.create_measurer(task, option, None)


def test_auto_scheduler_tasks_tune_on_the_cluster(cluster, tmp_path):
    from tensorforge.tune import auto

    cl, device_node, target = cluster

    def ray_softmax_rows(n, m):  # a workload the worker can only get by value
        X = te.placeholder((n, m), name="X")
        k = te.reduce_axis((0, m), name="k")
        mx = te.compute((n,), lambda i: te.max(X[i, k], axis=k), name="mx")
        E = te.compute((n, m), lambda i, j: te.exp(X[i, j] - mx[i]), name="E")
        k2 = te.reduce_axis((0, m), name="k2")
        S = te.compute((n,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
        Y = te.compute((n, m), lambda i, j: E[i, j] / S[i], name="Y")
        return [X, Y]

    task = auto.SearchTask(func=ray_softmax_rows, args=(13, 37), target=target)
    log = tmp_path / "auto.jsonl"
    option = tune.measure_option(number=2, repeat=2, timeout=30, runner=_runner(cl))
    task.tune(trials=4, log=str(log), seed=0, measure_option=option, progress=False)
    records = load_records(log)
    assert len(records) == 4 and all(r.result.ok for r in records), [r.result for r in records]
    assert all(r.result.meta["node_id"] == device_node for r in records)
    s, args = task.apply_best(str(log))
    mod = tf.build(s, args, target=target)
    x = np.random.default_rng(5).standard_normal((13, 37)).astype("float32")
    y = np.empty_like(x)
    mod(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_num_gpus_is_checked_before_a_cluster_starts(monkeypatch):
    from tensorforge.tune import ray_runner
    from tensorforge.tune.template import TuneError

    with pytest.raises(ValueError, match="num_gpus"):
        tune.RayRunner(address=None, num_gpus=0)
    monkeypatch.setattr(ray_runner, "_local_gpu_count", lambda: 1)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    started = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append(k))
    with pytest.raises(TuneError, match="num_gpus=2, but this host shows 1 GPU"):
        tune.RayRunner(address=None, num_gpus=2).connect("cuda")
    assert not started
    tune.RayRunner(address=None, num_gpus=1).connect("cuda")
    (kwargs,) = started
    assert kwargs["num_gpus"] == 1 and kwargs["resources"] == {target_resource("cuda"): 1}


def test_cli_ray_gpus_makes_a_runner_with_that_many_gpus():
    import argparse

    from tensorforge.tune.cli import ray_runner

    runner = ray_runner(argparse.Namespace(ray="local", ray_gpus=2))
    assert isinstance(runner, tune.RayRunner) and runner.num_gpus == 2
    assert ray_runner(argparse.Namespace(ray=None, ray_gpus=None)) is None
    with pytest.raises(SystemExit, match="--ray-gpus needs --ray"):
        ray_runner(argparse.Namespace(ray=None, ray_gpus=1))
