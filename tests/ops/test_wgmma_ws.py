"""The warp-specialized wgmma GEMM (ops/wgmma_ws.py): its plan choice, its CUDA C through nvcc
for sm_90a (no spills, no serialized wgmma), and on the GPU against float32 torch on shapes with
tails in every dimension, split k parts, and calls after calls (the split workspace left zero)."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from tensorforge.ops.wgmma_ws import ws_gemm_source
from tensorforge.ops.wgmma_ws_plan import WsPlan, choose_ws_plan, pingpong_plan
from tests.codegen.test_cuda_codegen import NVCC


def test_cooperative_plans_fill_the_sms_and_split_k_only_where_tiles_are_few():
    def choose(*args, **kw):
        return choose_ws_plan(*args, pingpong=False, **kw)

    wide = choose(2048, 3072, 768, 132)  # 256 tiles of 128 x 192: about 2 waves
    assert (wide.bn, wide.split) == (192, 1)
    deep = choose(2048, 768, 3072, 132)  # 96 tiles of 128 x 128 (as measured best)
    assert (deep.bn, deep.split) == (128, 1)
    cut = choose(2048, 768, 3072, 132, max_split=8)  # 64 tiles: cut in parts
    assert cut.split > 1 and cut.units(2048, 768) <= 132
    assert choose(1, 8, 8, 132, max_split=8).split == 1  # one k step: nothing to cut
    assert all(p.shared_bytes() <= 227 << 10 for p in (wide, deep, cut))


@pytest.mark.parametrize("m, n, k, tile", [
    (2048, 3072, 768, (64, 192, True)),  # (the H200 sweep's fastest, session 20)
    (2048, 768, 3072, (64, 192, True)),
    (1576, 2304, 768, (128, 128, True)),
    (1576, 3072, 768, (64, 128, True)),
    (1024, 1024, 1024, (64, 128, True)),
    (4096, 4096, 4096, (128, 256, False)),  # many tiles an SM: cooperative 128 x 256
])  # fmt: skip
def test_plans_take_the_measured_fastest_tiles_and_fit_shared_memory(m, n, k, tile):
    plan = choose_ws_plan(m, n, k, 132)
    assert (plan.bm, plan.bn, plan.pingpong) == tile
    assert plan.staged and plan.split == 1 and plan.shared_bytes() <= 227 << 10
    assert plan.stages >= 3


@pytest.mark.parametrize("k, n, d, residual", [(0, 8, 0, 0), (8, 12, 0, 0), (8, 8, 8, 0), (8, 8, 0, 4)])  # fmt: skip
def test_launch_refuses_sizes_and_addresses_the_kernel_cannot_take(k, n, d, residual):
    from tensorforge.errors import ScheduleError
    from tensorforge.ops.wgmma_ws import launch

    with pytest.raises(ScheduleError, match="ws_gemm"):
        launch(pingpong_plan(1, 128), "bias_residual", "float16", 0, 0, d, 0, 0, 0, 8, n, k, 132, residual)  # fmt: skip


@pytest.mark.parametrize("plan, epilogue, dtype", [
    (WsPlan(192, 4, 2, 1), "bias_gelu", "float16"),
    (WsPlan(128, 4, 2, 2), "bias", "bfloat16"),
    (pingpong_plan(1, 192), "bias_residual", "float16"),
    (pingpong_plan(1, 256), "bias_gelu", "bfloat16"),
])  # fmt: skip
def test_source_compiles_for_sm90a_without_spills_or_serialized_wgmma(plan, epilogue, dtype, tmp_path):  # fmt: skip
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    src = tmp_path / "ws.cu"
    src.write_text(ws_gemm_source(plan, epilogue, dtype))
    command = [NVCC, "-gencode=arch=compute_90a,code=sm_90a", "--cubin", "-Xptxas", "-v", "-o", str(tmp_path / "ws.cubin"), str(src)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "0 bytes spill stores" in result.stderr and "C7515" not in result.stderr, result.stderr


@pytest.mark.cuda
@pytest.mark.parametrize("m, n, k, epilogue, dtype, plan", [
    (1, 8, 8, "none", "float16", None),
    (131, 200, 136, "bias", "float16", None),
    (257, 392, 520, "bias_gelu", "float16", WsPlan(128, 4, 2, 3)),
    (130, 64, 1000, "bias", "bfloat16", WsPlan(256, 3, 2, 2)),
    (300, 264, 200, "bias_gelu", "bfloat16", WsPlan(192, 4, 2, 1, regs=False)),
    (260, 136, 1032, "bias_residual", "float16", WsPlan(128, 4, 2, 3, staged=True, inflight=2)),
    # ping-pong, on 3 blocks (each warpgroup several tiles, turns after turns)
    (1, 8, 8, "bias_residual", "float16", pingpong_plan(2, 128)),
    (517, 392, 1000, "bias_gelu", "float16", pingpong_plan(2, 128)),
    (263, 520, 72, "bias_residual", "bfloat16", pingpong_plan(1, 256)),
    (197, 200, 520, "residual", "float16", replace(pingpong_plan(1, 192), inflight=2)),
    (130, 136, 136, "none", "float16", WsPlan(128, 4, 2, 1, pingpong=True, regs=False)),
    (333, 1000, 64, "bias_gelu", "bfloat16", pingpong_plan(1, 128)),
])  # fmt: skip
def test_ws_gemm_matches_torch(m, n, k, epilogue, dtype, plan):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from tensorforge.ops.wgmma_ws import launch

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: sm_90 only")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = plan or choose_ws_plan(m, n, k, sms)
    tdt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(tdt)
    b = (torch.randn(k, n, device="cuda", generator=g) / k**0.5).to(tdt)
    bias = torch.randn(n, device="cuda", generator=g).to(tdt)
    res = torch.randn(m, n, device="cuda", generator=g).to(tdt)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
    work = torch.zeros(m, n, device="cuda")
    counts = torch.zeros(4096, device="cuda", dtype=torch.int32)
    ref = a.float() @ b.float() + (bias.float() if epilogue.startswith("bias") else 0)
    ref = F.gelu(ref) if epilogue == "bias_gelu" else ref
    ref = ref + res.float() if epilogue.endswith("residual") else ref
    blocks = 3 if plan.pingpong else sms
    tol = 2e-2 if dtype == "bfloat16" else 4e-3
    for _ in range(2):  # the second call sees the workspace and counters the first left
        launch(plan, epilogue, dtype, a.data_ptr(), b.data_ptr(), d.data_ptr(), bias.data_ptr(),
               work.data_ptr(), counts.data_ptr(), m, n, k, blocks, res.data_ptr())  # fmt: skip
        torch.cuda.synchronize()
        torch.testing.assert_close(d.float(), ref, atol=tol * ref.abs().max().item(), rtol=tol)
    assert not work.any() and not counts.any()
