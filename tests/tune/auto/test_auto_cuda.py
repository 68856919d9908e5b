"""GPU sketches (SSSRRSRS tiling, shared-memory staging, cross-thread reductions): the CUDA C they
make compiles with nvcc here; on a GPU, they match NumPy and the search runs."""

import shutil
import subprocess

import numpy as np
import pytest
from auto_workloads import CASES

import tensorforge as tf
from tensorforge.te.tensor import PlaceholderOp
from tensorforge.tune.auto import SearchTask

TARGET = "cuda -arch=sm_90"
NVCC = shutil.which("nvcc")


def _cuda_source(task, trace):
    s, tensors = task.instantiate(trace)
    return tf.build(s, tensors, target=task.target).get_source("cuda")


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_gpu_sketches_compile_with_nvcc(tmp_path):
    sources = []
    for name, seeds in (("matmul_bias_gelu", (0, 1)), ("conv_bn_relu", (2,))):
        func, args, _ = CASES[name]
        task = SearchTask(func, args, TARGET)
        traces = [task.sample(seed) for seed in seeds]
        from tensorforge.tune.auto.analytic import first_guess

        traces.append(first_guess(task))
        kinds = {step.kind for t in traces for step in t.steps}
        assert {"bind", "compute_at", "cache_read"} <= kinds
        sources += [_cuda_source(task, t) for t in traces]
    assert any("__shared__" in src for src in sources)  # inputs staged in shared memory
    for k, src in enumerate(sources):
        path = tmp_path / f"k{k}.cu"
        path.write_text(src)
        result = subprocess.run(
            [NVCC, "--ptx", "-arch=sm_90", str(path), "-o", str(tmp_path / f"k{k}.ptx")],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr[-2000:]


def _check_on_gpu(task, trace, reference, seed):
    s, tensors = task.instantiate(trace)
    mod = tf.build(s, tensors, target=task.target)
    rng = np.random.default_rng(seed)
    dev = tf.cuda(0)
    inputs = [t for t in tensors if isinstance(t.op, PlaceholderOp)]
    arrays = [rng.uniform(-1, 1, [int(e.value) for e in t.shape]).astype("float32") for t in inputs]
    out = tensors[-1]
    result = tf.nd.empty([int(e.value) for e in out.shape], "float32", dev)
    mod(*[tf.nd.array(a, dev) for a in arrays], result)
    np.testing.assert_allclose(result.numpy(), reference(*arrays), rtol=2e-4, atol=2e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["matmul", "matmul_bias_gelu", "conv2d", "conv_bn_relu"])
def test_gpu_schedules_match_numpy(name):
    from tensorforge.tune.auto.analytic import first_guess

    func, args, reference = CASES[name]
    task = SearchTask(func, args, "cuda")
    _check_on_gpu(task, first_guess(task), reference, 0)
    for seed in range(4):
        _check_on_gpu(task, task.sample(seed), reference, seed)


@pytest.mark.cuda
def test_gpu_search_finds_a_working_schedule(tmp_path):
    from tensorforge import tune

    func, _, _ = CASES["matmul"]
    task = SearchTask(func, (256, 256, 256), "cuda")
    option = tune.measure_option(number=5, repeat=2, timeout=30, check_correctness=True)
    tuner = task.tune(24, log=tmp_path / "g.jsonl", measure_option=option, progress=False)
    assert np.isfinite(tuner.best_cost)
    s, tensors = task.apply_best(tmp_path / "g.jsonl")
    tf.build(s, tensors, target=task.target)
