"""Scheduled CUDA kernels: the CUDA C compiles with nvcc and holds what the schedule asked for
(everywhere); on a GPU (marker `cuda`) each kernel matches numpy."""

import shutil
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tests.ops.cuda_kernels import KERNELS

TARGET = "cuda -arch=sm_90"
EXPECT = {  # what each schedule asked for, as it must appear in the source
    "elementwise_bind": ["blockIdx.x", "threadIdx.x", "float4", "__launch_bounds__(256)"],
    "non_divisible_bind": ["blockIdx.x", "threadIdx.x", "< 1000"],
    "tiled_matmul": ["__shared__", "__syncthreads()", "threadIdx.y", "blockIdx.y", "float Cp[16]"],
    "row_sum_cross_thread": ["__shfl_down_sync", "blockIdx.x"],
    "rfactor_row_max": ["__shfl_down_sync", "fmaxf"],
    "softmax": ["__shared__", "__syncthreads()", "__shfl_down_sync", "float4"],
    "dynamic_shape": ["int n", "blockIdx.x"],
    "tiled_matmul_scalar_loads": ["__shared__", "__syncthreads()"],
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cuda_source_compiles(name, tmp_path):
    s, args, _ = KERNELS[name]()
    mod = tf.build(s, args, target=TARGET)
    source = mod.get_source("cuda")
    for needle in EXPECT[name]:
        assert needle in source, f"{needle!r} missing from the CUDA C of {name}"
    assert "__restrict__" in source
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not on PATH")
    path = tmp_path / f"{name}.cu"
    path.write_text(source)
    result = subprocess.run(
        ["nvcc", "-arch=sm_90", "--ptx", "-o", str(tmp_path / "k.ptx"), str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_too_many_threads_per_block():
    A = te.placeholder((4096,), name="A")
    B = te.compute((4096,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=2048)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(tf.BuildError, match="threadIdx.x"):
        tf.build(s, [A, B], target=TARGET)


def test_calling_without_gpu_says_so_or_runs():
    s, args, _ = KERNELS["non_divisible_bind"]()
    mod = tf.build(s, args, target=TARGET)
    assert "B[" in mod.get_source("cuda")


def _gpu_random(shape, rng):
    return rng.uniform(-1, 1, shape).astype("float32")


@pytest.mark.cuda
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cuda_kernel_matches_numpy(name):
    rng = np.random.default_rng(7)
    s, args, ref = KERNELS[name]()
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    sizes = [(1000,), (777,)] if name == "dynamic_shape" else [None]
    for size in sizes:
        inputs = [_gpu_random(size or tuple(int(d.value) for d in t.shape), rng) for t in args[:-1]]
        out_shape = size or tuple(int(d.value) for d in args[-1].shape)
        out = tf.nd.array(np.full(out_shape, np.nan, "float32"), dev)
        mod(*[tf.nd.array(a, dev) for a in inputs], out)
        np.testing.assert_allclose(out.numpy(), ref(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
def test_cpu_array_to_gpu_kernel_is_argument_error():
    s, args, _ = KERNELS["non_divisible_bind"]()
    mod = tf.build(s, args, target="cuda")
    with pytest.raises(tf.ArgumentError, match="'A'"):
        mod(np.ones(1000, "float32"), tf.nd.empty((1000,), "float32", tf.cuda(0)))
