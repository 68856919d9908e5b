"""GPU schedules as TVM users write them: virtual threads (and multi-kernel modules).

The CUDA C compiles with the local nvcc; `@pytest.mark.cuda` tests run it against NumPy.
"""

from __future__ import annotations

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
