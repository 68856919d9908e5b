"""Tensor-core GEMM (ops/gemm_fp16.py through ops/tensor_core.py's mma.sync intrinsics): the
CUDA compiles here with nvcc (no spills, the expected mma count); `@pytest.mark.cuda` tests run
it against a float64 reference on the GPU machine."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ops.gemm_fp16 import TensorCoreTiles, gemm_tensorcore_template, schedule_gemm_fp16
from tensorforge.ops.tensor_core import mma_sync
from tensorforge.target import Target
from tensorforge.te import dtype as dt
from tests.codegen.test_cuda_codegen import NVCC, nvcc_ptx
from tests.codegen.test_half_precision import as_float, as_storage

SMALL = TensorCoreTiles(64, 64, 32, 32, 32)


def source_of(m, n, k, **kw):
    s, args = schedule_gemm_fp16(m, n, k, **kw)
    return tf.build(s, args, target="cuda").get_source("cuda")


def ptxas_report(text: str, tmp_path) -> str:
    src = tmp_path / "gemm.cu"
    src.write_text(text)
    result = subprocess.run(
        [NVCC, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "g.cubin"), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.parametrize(
    "dtype, epilogue, batch",
    [("float16", "none", None), ("bfloat16", "bias_gelu", None), ("float16", "bias", 3)],
)
def test_tensorcore_gemm_compiles_without_spills(dtype, epilogue, batch, tmp_path):
    text = source_of(256, 256, 128, dtype=dtype, epilogue=epilogue, batch=batch)
    assert "tf_mma_sync<64, 64, 32>(C, " in text and "tf_mma_fill_zero<64, 64>(C)" in text
    assert "float C[128];" in text  # a 64 x 64 fragment: 128 floats a lane
    assert "tf_cp_async<16>" in text and "A_shared_mbar[8]" in text  # 4 stages on mbarriers
    store = "tf_mma_store<64, 64>" if epilogue == "none" else "tf_mma_store_epi<64, 64, "
    assert store in text
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    report = ptxas_report(text, tmp_path)
    assert "0 bytes spill stores" in report, report
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    assert registers <= 255
    ptx = nvcc_ptx(text, tmp_path)
    # 64 x 64 warp tile, k step 32: 4 x 8 m16n8 tiles x 2 k16 steps, all unrolled
    assert ptx.count("mma.sync.aligned.m16n8k16") == 64
    assert ptx.count("ldmatrix.sync.aligned") == 16


def test_shared_rows_are_padded_for_ldmatrix():
    text = source_of(128, 128, 64)
    # A tile 128 x 32 with rows of 40 halves, B tile 32 x 128 with rows of 136, one per k step
    assert "half A_shared[10240]" in text and "half B_shared[8704]" in text
    assert ", 40, &B_shared[" in text and ", 136)" in text
    text = source_of(128, 128, 256)  # 8 k steps: 4 stages, past the 48 KiB of static memory
    assert "shared memory: 75776 bytes (dynamic)" in text
    assert "B_shared = reinterpret_cast<half*>(tf_smem + 40960)" in text


def test_template_default_is_the_default_schedule():
    with Target("cuda"):
        s, args = gemm_tensorcore_template(128, 128, 64)
    assert "tf_mma_sync<64, 64, 32>" in tf.build(s, args, target="cuda").get_source("cuda")


@pytest.mark.parametrize(
    "shape, message",
    [((100, 64, 64), "not a multiple of 16"), ((64, 64, 40), "not a multiple of 16")],
)
def test_sizes_tensor_cores_cannot_take_are_refused(shape, message):
    with pytest.raises(tf.ScheduleError, match=message):
        schedule_gemm_fp16(*shape)


def test_mma_intrinsic_checks_its_tile():
    with pytest.raises(tf.ScheduleError, match="multiple of 16"):
        mma_sync(24, 32, 16)
    with pytest.raises(tf.ScheduleError, match="dtype"):
        mma_sync(32, 32, 16, "float64")
    with pytest.raises(tf.ScheduleError, match="k depth 12 of float32 must be a multiple of 8"):
        mma_sync(32, 32, 12, "float32")


def test_float32_tiles_take_the_tf32_mma():
    """float32 tiles: m16n8k8 in TF32 (k steps of 8), each operand rounded to nearest."""
    intrin = mma_sync(32, 32, 8, "float32")
    (update,) = intrin.update
    assert intrin.name == "mma_sync_float32_32x32x8"
    assert update.name == "tf_mma_sync_tf32<32, 32, 8>"
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in update.source
    assert "cvt.rna.tf32.f32" in update.source
    assert mma_sync(32, 32, 16).update[0].name == "tf_mma_sync<32, 32, 16>"  # halves: m16n8k16


def test_warp_fragment_read_elementwise_is_refused():
    A = te.placeholder((32, 32), "float16", name="A")
    C = te.compute((32, 32), lambda i, j: A[i, j].astype("float32"), name="C")
    D = te.compute((32, 32), lambda i, j: C[i, j] * 2, name="D")
    s = te.create_schedule(D.op)
    s[C].set_scope("warp")
    s[C].compute_at(s[D], D.op.axis[0])
    s[D].bind(D.op.axis[0], te.thread_axis("blockIdx.x"))
    with pytest.raises(tf.BuildError, match="warp-scope fragment 'C'"):
        tf.build(s, [A, D], target="cuda")


# -- on the GPU --------------------------------------------------------------------------------


def gelu(x):
    from math import sqrt

    erf = np.vectorize(__import__("math").erf)
    return x * 0.5 * (1 + erf(x / sqrt(2.0)))


def run_gemm(
    m, n, k, rng, dtype="float16", epilogue="none", batch=None, out_dtype=None, tiles=None
):
    s, args = schedule_gemm_fp16(m, n, k, dtype, out_dtype, epilogue, batch, tiles)
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    lead = (batch,) if batch else ()
    a = as_storage(rng.uniform(-1, 1, (*lead, m, k)), dtype)
    b = as_storage(rng.uniform(-1, 1, (*lead, k, n)), dtype)
    bias = as_storage(rng.uniform(-1, 1, n), dtype)
    out_dtype = out_dtype or dtype
    d = tf.nd.empty((*lead, m, n), dt.numpy_dtype(out_dtype), dev)
    arrays = [tf.nd.array(a, dev), tf.nd.array(b, dev)]
    if epilogue != "none":
        arrays.append(tf.nd.array(bias, dev))
    mod(*arrays, d)
    ref = as_float(a, dtype).astype("float64") @ as_float(b, dtype).astype("float64")
    if epilogue != "none":
        ref = ref + as_float(bias, dtype)
    if epilogue == "bias_gelu":
        ref = gelu(ref)
    got = as_float(d.numpy(), out_dtype) if out_dtype != "float32" else d.numpy()
    tol = {"float16": 2**-9, "bfloat16": 2**-6, "float32": 1e-5}[out_dtype]
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(256, 256, 128), (128, 384, 64), (16, 48, 16), (512, 256, 1024)])
def test_tensorcore_gemm_matches_numpy(dtype, shape, rng):
    run_gemm(*shape, rng, dtype=dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("epilogue", ["bias", "bias_gelu"])
def test_tensorcore_gemm_fused_epilogue(epilogue, rng):
    run_gemm(256, 128, 256, rng, epilogue=epilogue)


@pytest.mark.cuda
def test_tensorcore_gemm_batched_float32_out_small_tiles(rng):
    run_gemm(128, 64, 96, rng, batch=3, out_dtype="float32", tiles=SMALL)
