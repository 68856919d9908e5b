"""N-stage software pipelines of shared tiles: `double_buffer(stages)` lowers to `stages` copies
filled `stages - 1` steps ahead (inject_double_buffer), fills of global memory become cp.async
commit groups and the barrier before a tile is read waits for its group (CUDA codegen).

The CUDA C compiles here; `@pytest.mark.cuda` tests run it against NumPy, with loops shorter than
the pipeline and shapes that leave partial tiles."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge.ops.gemm_fp16 import TensorCoreTiles
from tests.codegen.test_cuda_codegen import NVCC
from tests.codegen.test_cuda_tvm_schedules import vthread_gemm
from tests.ops.test_gemm_fp16 import run_gemm, source_of


def staged_gemm(n, m, k, stages, sync="barrier"):
    s, args = vthread_gemm(n, m, k)
    for stage in s.stages:
        if stage.name.endswith(".shared"):
            stage.double_buffer(stages, sync)
    return s, args


def kernel_text(s, args):
    return tf.build(s, args, target="cuda").get_source("cuda")


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_fills_run_stages_minus_one_steps_ahead(stages):
    text = kernel_text(*staged_gemm(128, 128, 256, stages))
    # 64 x 64 blocks with k slices of 8: each tile is 64 * 8 floats, `stages` copies of it
    assert f"float A_shared[{512 * stages}]" in text
    assert f"cp.async.wait_group {stages - 2};" in text
    assert f"(k_c_outer + {stages - 1}) < 32" in text  # the fill of the slice stages-1 ahead
    assert text.count("cp.async.commit_group") == stages  # the prologue's stages-1, the loop's
    assert "tf_cp_async<16>" in text
    loop = text[text.index("for (int k_c_outer") :]
    assert loop.index("cp.async.wait_group") < loop.index("__syncthreads()")
    assert loop.index("__syncthreads()") < loop.index("tf_cp_async")  # one barrier, then fill


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_mbarrier_pipeline_waits_on_slots_not_on_the_block(stages):
    text = kernel_text(*staged_gemm(128, 128, 256, stages, "mbarrier"))
    loop = text[text.index("for (int k_c_outer") :]
    assert f"unsigned long long A_shared_mbar[{2 * stages}];" in text
    assert "__syncthreads()" not in loop[: loop.index("cp.async.wait_all")]  # none in the loop
    assert "cp.async.commit_group;" not in text and "cp.async.wait_group 0" not in text
    assert text.count("tf_mbar_cp_arrive(&") == stages  # the prologue's stages-1, the loop's
    # the wait for this step's slot to be full (k % stages), then the release of the slot
    wait = loop.index(f"tf_mbar_wait(&A_shared_mbar[k_c_outer % {stages}]")
    arrive = loop.index("tf_mbar_warp_arrive")
    refill = loop.index("tf_cp_async")
    assert wait < arrive and (refill < wait if stages == 2 else arrive < refill)
    assert f"tf_mbar_wait(&A_shared_mbar[{stages} + " in loop  # the slot is free before a refill
    with pytest.raises(
        tf.ScheduleError, match="sync must be 'barrier', 'mbarrier' or 'mbarrier_lag'"
    ):
        next(st for st in vthread_gemm(64, 64, 64)[0].stages if st.name.endswith(".shared")).double_buffer(2, "fence")  # fmt: skip


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_a_lag_pipeline_of_synchronous_compute_compiles_for_sm_80(tmp_path):
    # its drain waits for wgmma's reads; with plain loads there are none (and no wgmma on sm_80)
    s, args = staged_gemm(128, 128, 256, 3, "mbarrier_lag")
    text = tf.build(s, args, target="cuda -arch=sm_80").get_source("cuda")
    assert "tf_mbar_warp_arrive" in text and "wgmma" not in text
    source = tmp_path / "lag.cu"
    source.write_text(text)
    result = subprocess.run(
        [NVCC, "-arch=sm_80", "-cubin", "-o", str(tmp_path / "lag.cubin"), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_double_buffer_takes_a_stage_count_from_2_to_8():
    s, _ = vthread_gemm(64, 64, 64)
    stage = next(st for st in s.stages if st.name.endswith(".shared"))
    for bad in (1, 9, 2.5, True):
        with pytest.raises(tf.ScheduleError, match="stages must be an int from 2 to 8"):
            stage.double_buffer(bad)


def test_plain_double_buffer_is_two_stages_with_async_fills():
    text = kernel_text(*staged_gemm(64, 64, 64, 2))
    assert "float A_shared[1024]" in text and "cp.async.wait_group 0;" in text


def test_tensorcore_gemm_pipeline_and_raster_order():
    text = source_of(512, 512, 256)  # default: 4 stages, groups of 4 block rows (512 / 128)
    assert "A_shared_mbar[8]" in text and "tf_mma_sync<64, 64, 32>" in text  # mbarriers
    loop = text[text.index("for (int k_outer") :]  # 3+ stages: the refill follows the mma
    assert loop.index("tf_mbar_wait") < loop.index("tf_mma_sync") < loop.index("tf_cp_async")
    assert "grid=(16, 1, 1)" in text  # one fused block index: 4 x 4 blocks
    text = source_of(512, 512, 256, tiles=TensorCoreTiles(128, 128, 32, 64, 64, 4, 4, "barrier"))
    assert "cp.async.wait_group 2;" in text and "mbar" not in text[text.index("extern") :]
    loop = text[text.index("for (int k_outer") :]
    assert loop.index("__syncthreads()") < loop.index("tf_mma_sync") < loop.index("tf_cp_async")
    text = source_of(256, 256, 128, tiles=TensorCoreTiles(128, 128, 32, 64, 64, 1, 1))
    assert "cp.async" not in text and "grid=(2, 2, 1)" in text


def test_tensorcore_gemm_asks_ptxas_for_one_block_of_registers():
    # launch_min_blocks 1: __launch_bounds__(threads, 1), so ptxas may keep the next k step's
    # fragments in registers; the big-problem default is 128 x 256 blocks of 8 warps (mma.sync
    # off sm_90, wgmma there)
    with tf.Target("cuda -arch=sm_80"):
        text = source_of(4096, 4096, 4096, tiles=TensorCoreTiles.for_shape(4096, 4096, 4096))
    assert "__launch_bounds__(256, 1)" in text and "tf_mma_sync<64, 64, 64>" in text
    with tf.Target("cuda -arch=sm_90"):
        text = source_of(4096, 4096, 4096)
    assert "__launch_bounds__(256, 1)" in text and "tf_wgmma_sync<16, 256, 64, 1, 0>" in text
    plain = kernel_text(*staged_gemm(64, 64, 64, 2))  # other kernels: no minimum
    assert re.search(r"__launch_bounds__\(\d+\) ", plain)
    s, args = staged_gemm(64, 64, 64, 2)
    out = s[args[-1]]
    out.pragma(out.leaf_iter_vars[0], "launch_min_blocks", 0)
    with pytest.raises(tf.BuildError, match="launch_min_blocks must be at least 1"):
        kernel_text(s, args)


def test_tensorcore_cluster_pairs_share_b_by_multicast_bulk_copies():
    tiles = TensorCoreTiles(128, 256, 64, 64, 64, 4, 16, "mbarrier", 2)
    text = source_of(4096, 4096, 4096, tiles=tiles)
    assert "__cluster_dims__(2, 1, 1)" in text and "tf_bulk_rows<64, 256, 2>(&B_shared[" in text
    assert "tf_mbar_init(&A_shared_mbar[s], 256 + 1)" in text  # threads' cp.async + B's bytes
    assert "tf_mbar_init(&A_shared_mbar[4 + s], 16)" in text  # 8 warps of each of 2 blocks
    loop = text[text.index("for (int k_outer") :]
    assert "tf_mbar_warp_arrive_cluster(" in loop and "tf_mbar_wait_cluster(" in loop
    assert "tf_cp_async<16>(&A_shared" in loop and "B_shared[((k_outer + 3) % 4) * " in loop
    for bad, match in (
        (TensorCoreTiles(128, 256, 64, 64, 64, 4, 16, "barrier", 2), "mbarrier pipeline"),
        (TensorCoreTiles(128, 256, 64, 64, 64, 4, 1, "mbarrier", 2), "groups of 1"),
    ):
        with pytest.raises(tf.ScheduleError, match=match):
            source_of(4096, 4096, 4096, tiles=bad)


def test_tensorcore_tiles_too_deep_for_shared_memory_are_refused():
    with pytest.raises(tf.ScheduleError, match="bytes of shared memory"):
        source_of(512, 512, 512, tiles=TensorCoreTiles(256, 256, 64, 64, 64, 4, 8))


# -- on the GPU --------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.parametrize("sync", ["barrier", "mbarrier"])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("shape", [(128, 128, 256), (200, 130, 77), (97, 64, 8), (64, 64, 24)])
def test_staged_vthread_gemm_matches_numpy(stages, shape, sync, rng):
    n, m, k = (
        shape  # k / 8 = 32, 10 (partial), 1 and 3 slices: shorter and longer than the pipeline
    )
    s, args = staged_gemm(n, m, k, stages, sync)
    mod = tf.build(s, args, target="cuda")
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    dev = tf.cuda(0)
    A, B = tf.nd.array(a, dev), tf.nd.array(b, dev)
    C = tf.nd.array(np.full((n, m), np.nan, "float32"), dev)
    mod(A, B, C)
    np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.cuda
@pytest.mark.parametrize(
    "shape, tiles",
    [
        ((256, 512, 96), TensorCoreTiles(128, 256, 32, 64, 64, 3, 8)),
        ((512, 256, 64), TensorCoreTiles(256, 128, 32, 64, 64, 4, 8)),
        ((384, 128, 48), TensorCoreTiles(64, 64, 16, 32, 32, 4, 4)),
        ((128, 256, 192), TensorCoreTiles(128, 128, 64, 64, 64, 3, 1)),
        ((64, 64, 96), TensorCoreTiles(64, 64, 32, 32, 32, 1, 1)),
        ((256, 512, 320), TensorCoreTiles(128, 256, 64, 64, 64, 4, 2, "barrier")),
        ((256, 256, 128), TensorCoreTiles(128, 128, 64, 64, 64, 4, 2)),  # 2 steps, 4 stages
        ((256, 512, 320), TensorCoreTiles(128, 256, 64, 64, 64, 4, 2, "mbarrier", 2)),
        ((512, 256, 64), TensorCoreTiles(128, 128, 32, 64, 64, 3, 4, "mbarrier", 2)),
    ],
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensorcore_pipelines_match_numpy(shape, tiles, dtype, rng):
    run_gemm(*shape, rng, dtype=dtype, tiles=tiles)
