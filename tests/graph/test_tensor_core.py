"""Half-precision products on tensor cores (graph/lower_tensor_core.py, schedules_tensor_core.py).

Here (no GPU): which products take them, the tile choice, and that graphs of such products
(odd row counts, bias + GELU, attention's batched products, residual epilogues) build to CUDA C
that nvcc compiles for sm_90. On a GPU: against an fp32 reference, no worse than eager's error.
"""

import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph.lower_tensor_core import (  # noqa: E402
    MIN_ROWS,
    choose_tiles,
    wants_tensor_cores,
)
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_tensor_core import SOURCE  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import compiled_for  # noqa: E402

SM90 = "cuda -arch=sm_90"


def test_half_products_on_sm80_and_later_take_tensor_cores():
    sm90, sm75 = Target(SM90), Target("cuda -arch=sm_75")
    assert wants_tensor_cores(sm90, "float16", (128, 768), 768, True)
    assert wants_tensor_cores(sm90, "bfloat16", (8, 128, 128), 64, False)
    assert not wants_tensor_cores(sm75, "float16", (128, 768), 768, True)  # no mma.m16n8k16
    assert not wants_tensor_cores(sm90, "float32", (128, 768), 768, True)
    assert not wants_tensor_cores(sm90, "float16", (128, 768), 200, True)  # k not 16-term steps
    assert not wants_tensor_cores(sm90, "float16", (MIN_ROWS - 1, 768), 768, True)  # a GEMV
    # a computed right matrix is not padded: whole column tiles only
    assert not wants_tensor_cores(sm90, "float16", (8, 128, 100), 64, False)
    assert not wants_tensor_cores(Target("llvm"), "float16", (128, 768), 768, True)


@pytest.mark.parametrize(
    "batch, n, m, k",
    [(1, 2048, 3072, 768), (1, 128, 2304, 768), (12, 128, 128, 64), (1, 17, 48, 96),
     (1, 16, 16, 16), (3, 1000, 7, 32)],
)  # fmt: skip
@pytest.mark.parametrize("shared_limit", [227 << 10, 99 << 10])
def test_tiles_fit_the_warps_and_the_shared_memory(batch, n, m, k, shared_limit):
    t = choose_tiles(batch, n, m, k, sm_count=132, shared_limit=shared_limit)
    assert t.warps in (4, 8) and t.block_m % t.warp_m == 0 and t.block_n % t.warp_n == 0
    assert t.warp_m % 16 == 0 and t.warp_n % 16 == 0 and k % t.block_k == 0
    assert 1 <= t.stages <= k // t.block_k
    shared = (t.block_m * (t.block_k + 8) + t.block_k * (t.block_n + 8)) * 2 * t.stages
    assert shared + t.block_m * t.block_n * 4 == t.shared_bytes() <= shared_limit
    assert t.block_m <= max(16, 2 * n)  # rows padded at most to twice their number


def test_the_target_bounds_the_shared_memory():
    assert Target(SM90).max_shared_memory_opt_in == 227 << 10
    sm86 = Target("cuda -arch=sm_86")
    big = choose_tiles(1, 4096, 4096, 4096, sm86.sm_count, sm86.max_shared_memory_opt_in)
    assert big.shared_bytes() <= 99 << 10 and big.stages >= 2


def test_large_products_take_large_tiles_and_small_ones_fill_the_sms():
    assert choose_tiles(1, 2048, 3072, 768, 132).block_m == 128
    small = choose_tiles(1, 128, 768, 768, 132)
    assert small.block_m * small.block_n < 128 * 128  # 6 blocks of 128 x 128 would idle SMs


def half_graph(dtype=torch.float16):
    """Odd rows (100, 17), bias + GELU, residual adds, attention's two batched products."""

    def fn(x, w1, b1, w2, small, q, k, v):
        h = F.gelu(F.linear(x, w1, b1))  # 100 x 208 from 96
        y = F.linear(h, w2) + x[:, :48]  # 100 x 48 from 208: k of 13 16-term steps
        s = F.linear(small, w1)  # 17 rows
        att = torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1) @ v  # 6 x 64 x 64, d 32
        return y, s, att

    gen = torch.Generator().manual_seed(0)
    shapes = [(100, 96), (208, 96), (208,), (48, 208), (17, 96), (6, 64, 32), (6, 64, 32),
              (6, 64, 64)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen).to(dtype) for s in shapes]
    return fn, inputs, (1, 2, 3)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dtype", [torch.float16])
def test_half_graph_builds_tensor_core_kernels_that_nvcc_compiles(tmp_path, dtype):
    _, _, compiled = compiled_for(SM90, graph=lambda: half_graph(dtype))
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    on_tensor_cores = [s for s in kernels if s.source == SOURCE]
    # the three linear layers (k = 96, 208: whole 16-term steps) and the two batched products
    assert len(on_tensor_cores) == 5, [s.source for s in kernels]
    for k, module in enumerate({id(s.module): s.module for s in on_tensor_cores}.values()):
        # one module a translation unit: the intrinsics' headers go inside no namespace
        source = tmp_path / f"k{k}.cu"
        source.write_text(module.get_source("cuda"))
        result = subprocess.run(
            ["nvcc", "-arch=sm_90", "--ptx", "-o", str(tmp_path / f"k{k}.ptx"), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.cuda
@pytest.mark.skipif(not TORCH_CUDA, reason="needs torch with CUDA and a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_graph_on_the_gpu_is_as_close_to_fp32_as_eager(dtype):
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=lambda: half_graph(dtype))
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert any(s.source == SOURCE for s in kernels)
    reference = fn(*[t.float() for t in inputs])
    eager = fn(*inputs)
    for _ in range(3):  # kernels one by one, then a CUDA graph
        got = compiled(list(inputs))
        torch.cuda.synchronize()
        for g, e, r in zip(got, eager, reference):
            assert g.shape == e.shape and g.dtype == e.dtype
            scale = r.abs().max()
            ours = ((g.float() - r).abs().max() / scale).item()
            theirs = ((e.float() - r).abs().max() / scale).item()
            assert ours <= 2 * theirs + 2e-3, (ours, theirs)
