"""GPU schedules as TVM users write them: virtual threads and multi-kernel modules.

The CUDA C compiles with the local nvcc; `@pytest.mark.cuda` tests run it against NumPy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tests.codegen.test_cuda_codegen import NVCC, nvcc_ptx


def vthread_gemm(n, m, k, block=64, threads=8, vthreads=2, k_tile=8, vector=4):
    """TVM's GPU GEMM: block tiles, `vthreads`^2 virtual threads per thread, shared and local caches."""
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    BL = s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")
    thread_y = te.thread_axis((0, threads), "threadIdx.y")
    thread_x = te.thread_axis((0, threads), "threadIdx.x")
    by, yi = s[C].split(C.op.axis[0], factor=block)
    bx, xi = s[C].split(C.op.axis[1], factor=block)
    vy, yi = s[C].split(yi, nparts=vthreads)
    vx, xi = s[C].split(xi, nparts=vthreads)
    ty, yi = s[C].split(yi, nparts=threads)
    tx, xi = s[C].split(xi, nparts=threads)
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(vy, te.thread_axis((0, vthreads), "vthread", name="vy"))
    s[C].bind(vx, te.thread_axis((0, vthreads), "vthread", name="vx"))
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[CC].compute_at(s[C], tx)
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=k_tile)
    s[CC].reorder(ko, ki, *s[CC].op.axis)
    s[AL].compute_at(s[CC], ki)
    s[BL].compute_at(s[CC], ki)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    for stage in (s[AA], s[BB]):
        fused = stage.fuse(*stage.op.axis)
        rest, vec = stage.split(fused, factor=vector)
        rest, tx_part = stage.split(rest, factor=threads)
        _, ty_part = stage.split(rest, factor=threads)
        stage.bind(ty_part, thread_y)
        stage.bind(tx_part, thread_x)
        stage.vectorize(vec)
    return s, [A, B, C]


def _gemm_data(n, m, k, rng):
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    return a, b, a.astype("float64") @ b.astype("float64")


def test_vthread_gemm_interleaves_one_thread_and_compiles(tmp_path):
    s, args = vthread_gemm(256, 256, 256)
    text = tf.lower(s, args, target="cuda").__str__()
    assert "vthread" not in text  # every virtual thread became a copy
    source = tf.build(s, args, target="cuda").get_source("cuda")
    # 2 x 2 virtual threads of a 4 x 4 accumulator each: one 64-register array
    assert "float C_local[64];" in source
    assert source.count("__syncthreads();") == 2  # the shared tiles are filled once, not per copy
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    assert ".entry main_kernel" in nvcc_ptx(source, tmp_path)


def test_three_vthread_axes_on_one_stage_bind():
    A = te.placeholder((8, 6, 4), name="A")
    B = te.compute((8, 6, 4), lambda i, j, k: A[i, j, k] + 1, name="B")
    s = te.create_schedule(B.op)
    for axis, name in zip(s[B].op.axis, "abc"):
        s[B].bind(axis, te.thread_axis("vthread", name=name))
    assert "vthread" not in str(tf.lower(s, [A, B], target="cuda"))


@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(256, 256, 256), (200, 130, 77), (1, 1, 1), (97, 64, 129)])
def test_vthread_gemm_matches_numpy(shape, rng):
    n, m, k = shape
    s, args = vthread_gemm(n, m, k)
    mod = tf.build(s, args, target="cuda")
    a, b, ref = _gemm_data(n, m, k, rng)
    dev = tf.cuda(0)
    A, B, C = tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.empty((n, m), "float32", dev)
    mod(A, B, C)
    np.testing.assert_allclose(C.numpy(), ref, rtol=1e-4, atol=1e-4)


# -- multi-kernel modules: root stages bound to different grids ------------------------------


def rfactor_sum(n, parts=64):
    """rfactor partials, one block each (kernel 0); their sum in one unbound thread (kernel 1)."""
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="C")
    s = te.create_schedule(C.op)
    ko, _ = s[C].split(C.op.reduce_axis[0], nparts=parts)
    CF = s.rfactor(C, ko)
    s[CF].bind(s[CF].op.axis[0], te.thread_axis("blockIdx.x"))
    return s, [A, C]


def two_grids(n):
    """B = 2A on 256-thread blocks, C = B + A on 64-thread blocks: B lives between two kernels."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2, name="B")
    C = te.compute((n,), lambda i: B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    for stage, threads in ((s[B], 256), (s[C], 64)):
        bx, tx = stage.split(stage.op.axis[0], factor=threads)
        stage.bind(bx, te.thread_axis("blockIdx.x"))
        stage.bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, C]


def test_rfactor_partials_and_combine_are_two_kernels_of_one_function(tmp_path):
    s, args = rfactor_sum(10007)
    assert "kernel kernel1:" in str(tf.lower(s, args, target="cuda", name="f"))
    mod = tf.build(s, args, target="cuda", name="f")
    assert mod.function_names == ("f",) and mod.entry_name == "f"
    (source,) = mod.sources
    assert [k.entry for k in source.kernels] == ["f_kernel0", "f_kernel1"]
    assert [p.name for p in source.intermediates] == ["C.rf"]
    assert source.intermediates[0].shape == (64,)
    assert [p.name for p in source.kernels[1].params] == ["C", "C.rf"]
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    ptx = nvcc_ptx(mod.get_source("cuda"), tmp_path)
    assert ".entry f_kernel0" in ptx and ".entry f_kernel1" in ptx


def test_stages_on_different_grids_get_their_own_launch(tmp_path):
    mod = tf.build(*two_grids(1000), target="cuda", name="g")
    (source,) = mod.sources
    assert [k.launch.block for k in source.kernels] == [(256, 1, 1), (64, 1, 1)]
    assert [k.launch.grid[0] for k in source.kernels] == [4, 16]
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    nvcc_ptx(mod.get_source("cuda"), tmp_path)


def test_one_kernel_functions_are_unchanged():
    s, args = vthread_gemm(64, 64, 64)
    (source,) = tf.build(s, args, target="cuda", name="h").sources
    assert (source.entry, source.symbol, source.kernels) == ("h", "h_kernel", ())


@pytest.mark.cuda
@pytest.mark.parametrize("n", [10007, 1, 64])
def test_rfactor_two_kernels_match_numpy(n, rng):
    s, args = rfactor_sum(n)
    mod = tf.build(s, args, target="cuda", name="f")
    a = rng.standard_normal(n).astype("float32")
    dev = tf.cuda(0)
    A, C = tf.nd.array(a, dev), tf.nd.empty((1,), "float32", dev)
    mod["f"](A, C)
    np.testing.assert_allclose(C.numpy(), [a.astype("float64").sum()], rtol=1e-4, atol=1e-4)
    assert mod.time_evaluator("f", dev, number=2)(A, C).mean > 0
    np.testing.assert_allclose(C.numpy(), [a.astype("float64").sum()], rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize("n", [1000, 1, 4099])
def test_two_grids_match_numpy(n, rng):
    mod = tf.build(*two_grids(n), target="cuda", name="g")
    a = rng.standard_normal(n).astype("float32")
    dev = tf.cuda(0)
    A, C = tf.nd.array(a, dev), tf.nd.empty((n,), "float32", dev)
    mod(A, C)
    np.testing.assert_allclose(C.numpy(), 3 * a, rtol=1e-6)


def one_kernel(n):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 3, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    return s, [A, C]


@pytest.mark.parametrize("make", [one_kernel, two_grids], ids=["one_kernel", "two_kernels"])
def test_build_name_is_the_entry_for_one_kernel_and_several(make):
    mod = tf.build(*make(1000), target="cuda -arch=sm_90", name="f")
    assert mod.function_names == ("f",) and mod.entry_name == "f"
    assert mod["f"] is mod.get_function("f")
    text = mod.get_source("cuda")
    kernels = ["f_kernel"] if make is one_kernel else ["f_kernel0", "f_kernel1"]
    assert re.findall(r"__global__ void __launch_bounds__\(\d+\) (\w+)\(", text) == kernels


def cpu_kernel(n):
    A = te.placeholder((n,), name="A")
    C = te.compute((n,), lambda i: A[i] * 3, name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(inner)
    return s, [A, C]


@pytest.mark.parametrize(
    "target, make",
    [
        pytest.param("cuda", one_kernel, marks=pytest.mark.cuda, id="cuda-one_kernel"),
        pytest.param("cuda", two_grids, marks=pytest.mark.cuda, id="cuda-two_kernels"),
        pytest.param("llvm", cpu_kernel, id="llvm"),
        pytest.param("c", cpu_kernel, id="c"),
    ],
)
def test_named_entry_runs_and_times_on_each_target(make, target, rng):
    mod = tf.build(*make(1000), target=target, name="f")
    a = rng.standard_normal(1000).astype("float32")
    dev = tf.device(target, 0)
    A, C = tf.nd.array(a, dev), tf.nd.empty((1000,), "float32", dev)
    for run in (mod, mod["f"]):
        C.copyfrom(np.zeros(1000, "float32"))
        run(A, C)
        np.testing.assert_allclose(C.numpy(), 3 * a, rtol=1e-6)
    assert mod.time_evaluator("f", dev, number=2)(A, C).mean > 0
