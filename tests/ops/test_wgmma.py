"""The wgmma (sm_90a) path of the tensor-core GEMM (ops/wgmma.py): 128B-swizzled cp.async fills,
warpgroup multiplies with a k step in flight (sync="mbarrier_lag") and a draining store.

CUDA compiles here with nvcc for sm_90a (no spills, the expected wgmma count); `@pytest.mark.cuda`
tests run it against NumPy on the GPU machine."""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import replace

import numpy as np
import pytest

import tensorforge as tf
from tensorforge.ops.gemm_fp16 import TensorCoreTiles, schedule_gemm_fp16
from tensorforge.ops.wgmma import swizzled_fill, tma_fill, wgmma_sync
from tensorforge.target import Target
from tests.codegen.test_cuda_codegen import NVCC
from tests.ops.test_gemm_fp16 import run_gemm, source_of

LAG = TensorCoreTiles(128, 256, 64, 16, 256, 4, 4, "mbarrier_lag", mma="wgmma")
PLAIN = TensorCoreTiles(128, 128, 64, 16, 128, 2, 2, mma="wgmma")
TMA = TensorCoreTiles(128, 256, 64, 16, 256, 4, 4, "mbarrier_lag", mma="wgmma", fill="tma")
TMA_PAIRS = TensorCoreTiles(128, 256, 64, 16, 256, 4, 4, "mbarrier_lag", 2, "wgmma", "tma")


def nvcc_sm90a(text: str, tmp_path, what: str) -> str:
    src = tmp_path / "k.cu"
    src.write_text(text)
    out = tmp_path / f"k.{what}"
    command = [NVCC, "-arch=sm_90a", f"--{what}", "-o", str(out), str(src)]
    if what == "cubin":
        command[3:3] = ["-Xptxas", "-v"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stderr if what == "cubin" else out.read_text()


@pytest.mark.parametrize(
    "dtype, epilogue, batch",
    [("float16", "none", None), ("bfloat16", "bias_gelu", None), ("float16", "bias", 2)],
)
def test_wgmma_gemm_compiles_for_sm90a_without_spills(dtype, epilogue, batch, tmp_path):
    text = source_of(512, 512, 512, dtype=dtype, epilogue=epilogue, batch=batch, tiles=LAG)
    assert "tf_wgmma_sync<16, 256, 64, 1>(C, " in text and "float C[128];" in text
    assert "extern __shared__ __align__(1024) unsigned char tf_smem[];" in text
    assert "tf_wgmma_wait_all()" in text  # the store drains the step still in flight
    fills = re.findall(r"tf_cp_async_sw128<(\d+), (\d+)>\(([^;]*)\);", text)
    assert {(r, c) for r, c, _ in fills} == {("128", "64"), ("64", "256")}
    # the last argument is the piece's offset in its own tile: no block index, no k step
    assert all("blockIdx" not in args.rsplit("], ", 1)[1] for *_, args in fills)
    assert "k_outer" not in fills[-1][2].rsplit("], ", 1)[1]
    loop = text[text.index("for (int k_outer") :]
    # lag: a step releases the slot of the step before it (the one its wgmma wait finished)
    assert "if (0 < k_outer) {\n      tf_mbar_warp_arrive(&A_shared_mbar[4 + (k_outer + 3) % 4]);" in loop  # fmt: skip
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    report = nvcc_sm90a(text, tmp_path, "cubin")
    assert "0 bytes spill stores" in report, report
    assert int(re.search(r"Used (\d+) registers", report).group(1)) <= 255
    ptx = nvcc_sm90a(text, tmp_path, "ptx")
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32") == 4  # k 64: 4 x k16
    assert "wgmma.wait_group.sync.aligned 1;" in ptx


@pytest.mark.parametrize("dtype, epilogue, batch", [("bfloat16", "bias_gelu", None), ("float16", "none", 2)])  # fmt: skip
def test_tma_fills_compile_for_sm90a(dtype, epilogue, batch, tmp_path):
    from tensorforge.codegen.base import TensorMap, codegen_for
    from tensorforge.target import as_target

    target = as_target("cuda -arch=sm_90")
    s, args = schedule_gemm_fp16(256, 512, 320, dtype=dtype, epilogue=epilogue, batch=batch, tiles=TMA)  # fmt: skip
    source = codegen_for("cuda").generate(tf.lower(s, args, target=target), target)
    text = source.text
    rows = 256 * (batch or 1)
    # one descriptor an operand, [all rows][last dim] in boxes of the tile's rows x 64
    assert source.tensor_maps == (
        TensorMap("A", dtype, rows, 320, 128), TensorMap("B", dtype, 320 * (batch or 1), 512, 64)
    )  # fmt: skip
    assert "const tf_tensor_map* __restrict__ A_tmap,\n    const tf_tensor_map* __restrict__ B_tmap," in text  # fmt: skip
    assert "__launch_bounds__(256, 1)" in text  # 8 whole warps though no fill splits over lanes
    assert (
        "tf_cp_async" not in text and text.count("tf_tma_sw128<128, 64, 1>(") == 4
    )  # 3 ahead + loop
    # full: the copying thread's two arrivals (with bytes); only it waits for a slot's release
    assert "tf_mbar_init(&A_shared_mbar[s], 2);" in text and "tf_mbar_cp_arrive(&" not in text
    assert "if (threadIdx.x + threadIdx.y + threadIdx.z == 0) tf_mbar_wait(&A_shared_mbar[4 + " in text  # fmt: skip
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    report = nvcc_sm90a(text, tmp_path, "cubin")
    assert "0 bytes spill stores" in report, report
    ptx = nvcc_sm90a(text, tmp_path, "ptx")
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier") >= 2
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32") == 4


def test_tma_fills_of_a_cluster_multicast_b(tmp_path):
    text = source_of(256, 512, 320, tiles=TMA_PAIRS)
    assert "__cluster_dims__(2, 1, 1)" in text
    assert "tf_tma_sw128<128, 64, 1>(" in text and "tf_tma_sw128<64, 256, 2>(" in text
    # a slot is refilled once both blocks' warps are done with it (each fills the other's)
    assert "tf_mbar_init(&A_shared_mbar[4 + s], 16);" in text
    assert "tf_mbar_warp_arrive_cluster(&A_shared_mbar[4 + " in text
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    ptx = nvcc_sm90a(text, tmp_path, "ptx")
    assert "mbarrier::complete_tx::bytes.multicast::cluster" in ptx


def test_tma_store_compiles_for_sm90a(tmp_path):
    text = source_of(256, 512, 320, epilogue="bias_gelu", tiles=replace(TMA, store="tma"))
    assert "const tf_tensor_map* __restrict__ D_tmap" in text
    assert "tf_tma_store_epi<16, 256, 2>(C, D_tmap, &D[" in text and "tf_mma_store" not in text
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    assert "0 bytes spill stores" in nvcc_sm90a(text, tmp_path, "cubin")
    ptx = nvcc_sm90a(text, tmp_path, "ptx")
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in ptx


def test_tma_fill_checks():
    with pytest.raises(tf.ScheduleError, match="64-column slabs"):
        tma_fill(128, 96)
    with pytest.raises(tf.ScheduleError, match="split the 1 64-column slabs"):
        tma_fill(64, 64, cluster=2)
    with pytest.raises(tf.ScheduleError, match="cluster 2 shares B.s tile"):
        schedule_gemm_fp16(512, 512, 512, tiles=replace(TMA_PAIRS, fill="cp_async"))
    with pytest.raises(tf.ScheduleError, match="wgmma's swizzled tiles only"):
        schedule_gemm_fp16(256, 256, 256, tiles=TensorCoreTiles(fill="tma"))


def test_wgmma_is_the_default_on_sm90_for_a_wave_of_blocks():
    with Target("cuda -arch=sm_90"):
        s, args = schedule_gemm_fp16(2048, 4096, 256)
    text = tf.build(s, args, target="cuda -arch=sm_90").get_source("cuda")
    assert (
        "tf_wgmma_sync<16, 256, 64, 1, 0>" in text and "tf_tma_sw128<64, 256, 1>" in text
    )  # no proxy fence after TMA
    assert TensorCoreTiles.for_shape(2048, 4096, 256, arch="sm_80").mma == "mma_sync"
    assert TensorCoreTiles.for_shape(2048, 4096, 128, arch="sm_90").mma == "mma_sync"  # 2 steps
    with Target("cuda -arch=sm_90"):  # small problems keep mma.sync's smaller tiles
        s, args = schedule_gemm_fp16(256, 256, 128)
    assert "tf_mma_sync<64, 64, 32>" in tf.build(s, args, target="cuda").get_source("cuda")


def test_executable_architecture_is_sm90a_for_wgmma():
    from tensorforge.codegen.base import codegen_for
    from tensorforge.runtime.cuda_exec import _arch_of
    from tensorforge.target import as_target

    target = as_target("cuda -arch=sm_90")
    s, args = schedule_gemm_fp16(256, 256, 256, tiles=LAG)
    source = codegen_for("cuda").generate(tf.lower(s, args, target=target), target)
    assert _arch_of(target, source) == "sm_90a"


@pytest.mark.parametrize(
    "tiles, message",
    [
        (TensorCoreTiles(128, 256, 64, 32, 256, 4, mma="wgmma"), "warp tiles of 16 rows"),
        (TensorCoreTiles(128, 256, 32, 16, 256, 4, mma="wgmma"), "k steps of 64"),
        (TensorCoreTiles(32, 256, 64, 16, 256, 4, mma="wgmma"), "multiple of 64"),
        (TensorCoreTiles(128, 256, 64, 16, 256, 2, 1, "mbarrier_lag", mma="wgmma"), "3\\+ stages"),
        (TensorCoreTiles(128, 256, 64, 64, 64, 4, 1, "mbarrier_lag"), "is for wgmma"),
        (TensorCoreTiles(128, 256, 64, 16, 256, 4, mma="wmma"), "mma must be"),
    ],
)
def test_wgmma_tiles_are_checked(tiles, message):
    with pytest.raises(tf.ScheduleError, match=message):
        schedule_gemm_fp16(512, 512, 512, tiles=tiles)


def test_wgmma_intrinsics_check_their_shapes():
    with pytest.raises(tf.ScheduleError, match="16 rows of its warpgroup"):
        wgmma_sync(32, 256, 64)
    with pytest.raises(tf.ScheduleError, match="pending must be 0 or 1"):
        wgmma_sync(16, 256, 64, pending=2)
    with pytest.raises(tf.ScheduleError, match="64-column slabs"):
        swizzled_fill(128, 96)


def test_lagged_release_needs_three_stages():
    A, B, _, C, D = __import__("tensorforge.ops.gemm_fp16", fromlist=["x"]).gemm_fp16(64, 64, 64)
    s = tf.te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [C])
    with pytest.raises(tf.ScheduleError, match="needs 3\\+ stages"):
        s[AS].double_buffer(2, "mbarrier_lag")


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape, tiles, dtype, epilogue, batch",
    [
        ((256, 512, 320), LAG, "float16", "none", None),  # 5 k steps, 4 stages
        ((256, 512, 192), LAG, "bfloat16", "bias_gelu", None),  # 3 k steps
        ((128, 256, 256), LAG, "float16", "bias", 3),
        ((256, 256, 128), PLAIN, "bfloat16", "none", None),  # wait for all, 2 stages
        (
            (512, 256, 512),
            TensorCoreTiles(256, 128, 64, 16, 128, 3, 1, "mbarrier_lag", mma="wgmma"),
            "float16",
            "none",
            None,
        ),  # fmt: skip
        ((256, 512, 320), TMA, "float16", "none", None),  # bulk tensor copies (TMA)
        ((256, 512, 192), TMA, "bfloat16", "bias_gelu", None),
        ((128, 256, 256), TMA, "float16", "bias", 3),  # maps over the batched operands
        ((256, 512, 320), TMA_PAIRS, "float16", "none", None),  # B multicast to pairs of blocks
        ((256, 512, 320), replace(TMA, store="tma"), "float16", "none", None),  # bulk stores
        (
            (512, 256, 192),
            replace(TMA, block_n=128, warp_n=128, store="tma"),
            "bfloat16",
            "bias_gelu",
            None,
        ),  # fmt: skip
        ((128, 256, 256), replace(TMA, store="tma"), "float16", "bias", 3),
        ((512, 256, 192), TMA_PAIRS, "bfloat16", "bias_gelu", None),
    ],
)
def test_wgmma_gemm_matches_numpy(shape, tiles, dtype, epilogue, batch, rng):
    run_gemm(*shape, rng, dtype=dtype, epilogue=epilogue, batch=batch, tiles=tiles)


@pytest.mark.cuda
def test_tma_store_gelu_is_exact_to_an_ulp(rng):
    # A = I: the accumulators hold B exactly, so D = GELU(B + bias) shows the epilogue's own error
    m = n = k = 256
    a = np.eye(m, k, dtype="float16")
    b = rng.uniform(-7, 7, (k, n)).astype("float16")
    bias = rng.uniform(-1, 1, n).astype("float16")
    s, args = schedule_gemm_fp16(m, n, k, epilogue="bias_gelu", tiles=replace(TMA, store="tma"))
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    d = tf.nd.array(np.full((m, n), np.nan, "float16"), dev)
    mod(tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.array(bias, dev), d)
    x = b.astype("float64") + bias.astype("float32").astype("float64")
    want = (x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))).astype("float16")
    got = d.numpy()
    ulp = np.spacing(np.abs(want)).astype("float64")
    assert np.all(np.abs(got.astype("float64") - want.astype("float64")) <= ulp), "GELU off by more than an fp16 ulp"  # fmt: skip
