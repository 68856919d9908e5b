"""float32 convolutions in TF32 on Hopper's wgmma (lower_tensor_core.tf32_wgmma_tiles,
ops/wgmma_tf32.py): K-major im2col columns and weights in 128-byte swizzled tiles. The path is
off by default (TF32_WGMMA_CONVS: no faster than mma.sync as measured); these tests turn it on.

Here (no GPU): which convolutions take it (sm_90, float32, enough blocks, 3+ k steps), its
tiles (the halves' bytes), the weights' rounding to TF32, the columns' K-major layout, and that
its kernels compile to a cubin for sm_90a. On a GPU: odd shapes against float64, within twice
eager's TF32 error, on the rule it names.
"""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import lower_tensor_core  # noqa: E402
from tensorforge.graph.lower_tensor_core import (  # noqa: E402
    choose_wgmma_tiles,
    tf32_wgmma_tiles,
)
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_tensor_core import WGMMA_SOURCE  # noqa: E402
from tensorforge.ops.wgmma_tf32 import round_to_tf32  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import (  # noqa: E402
    assert_compiles_with_nvcc,
    compiled_for,
    joined_sources,
)
from tests.graph.test_tf32 import relative_error, set_tf32  # noqa: E402

SM90 = Target("cuda -arch=sm_90")


@pytest.fixture(autouse=True)
def tf32_wgmma(monkeypatch):
    """The path is off by default (lower_tensor_core.TF32_WGMMA_CONVS: slower as measured)."""
    monkeypatch.setattr(lower_tensor_core, "TF32_WGMMA_CONVS", True)


def odd_convolutions():
    """A batch of 5 at 61 x 61 from 37 channels: a 3 x 3 convolution into 80 filters (333 taps,
    padded to 352: 11 k steps of 32) + bias + ReLU, and a 5 x 5 stride-2 one into 112 (925
    taps) at 31 x 31 + a residual-like add: each past TF32_MIN_MACS, on tiles of 64 x 128 and
    64 x 64 (positions padded to whole tiles, filters to 128); and a batch of 3 at 11 x 11 from
    512 channels into 300 filters, too few 64 x 64 tiles for the SMs (30): k split in 8."""

    def fn(img, w3, b3, w5, small, w_small):
        y = F.relu(F.conv2d(img, w3, b3, padding=1))
        z = F.conv2d(img, w5, stride=2, padding=2)
        return y, z + 0.5, F.relu(F.conv2d(small, w_small, padding=1))

    gen = torch.Generator().manual_seed(11)
    shapes = [(5, 37, 61, 61), (80, 37, 3, 3), (80,), (112, 37, 5, 5), (3, 512, 11, 11),
              (300, 512, 3, 3)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    for k in (1, 3, 5):  # weights of unit gain
        inputs[k] /= inputs[k][0].numel() ** 0.5
    return fn, inputs, (1, 2, 3, 5)


def wgmma_kernels(compiled) -> list:
    return [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.source == WGMMA_SOURCE]


def test_tf32_convolutions_take_wgmma_tiles_of_the_halves_bytes():
    tiles = tf32_wgmma_tiles(SM90, 16, 64, 3136, 576, "float32")  # ResNet's layer 1, batch 16
    half = choose_wgmma_tiles(16, 64, 3136, 1152, 132, SM90.max_shared_memory_opt_in, False)
    assert (tiles.block_m, tiles.block_n, tiles.stages, tiles.blocks) == (
        half.block_m, half.block_n, half.stages, half.blocks
    )  # fmt: skip
    assert tiles.block_k == 32 and tiles.dtype == "float32" and tiles.mma == "wgmma"
    assert tiles.shared_bytes() == half.shared_bytes() <= SM90.max_shared_memory_opt_in
    assert tf32_wgmma_tiles(SM90, 5, 80, 3721, 333, "float32").block_n == 128
    # not: another arch, a half dtype, under 3 k steps, too few blocks for the SMs
    assert tf32_wgmma_tiles(Target("cuda -arch=sm_80"), 16, 64, 3136, 576, "float32") is None
    assert tf32_wgmma_tiles(SM90, 16, 64, 3136, 576, "float16") is None
    assert tf32_wgmma_tiles(SM90, 16, 64, 3136, 64, "float32") is None
    assert tf32_wgmma_tiles(SM90, 1, 512, 49, 128, "float32") is None  # slices of 2 steps
    split = tf32_wgmma_tiles(SM90, 1, 512, 49, 4608, "float32")  # 8 tiles: k in 16 slices
    # 64 KiB a block: two an SM, and ptxas budgets registers for two (launch_min_blocks)
    assert (split.block_m, split.block_n, split.stages, split.blocks) == (64, 64, 4, 2)


def test_weights_round_to_tf32_as_cvt_rna():
    x = torch.tensor([1 + 2.0**-11, 1 + 2.0**-12, -(1 + 3 * 2.0**-11), 3.0, float("inf"), 0.0])
    assert round_to_tf32(x).tolist() == [1 + 2.0**-10, 1.0, -(1 + 2 * 2.0**-10), 3.0, float("inf"), 0.0]  # fmt: skip
    y = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    r = round_to_tf32(y)
    assert (r.view(torch.int32) & 0x1FFF).eq(0).all()  # 10 mantissa bits left
    assert ((r - y).abs() <= y.abs() * 2.0**-11).all()  # to nearest


def test_tf32_convolutions_read_k_major_columns():
    set_tf32(conv=True, matmul=False)
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=odd_convolutions)
    kernels = wgmma_kernels(compiled)
    assert len(kernels) == 3
    shapes = sorted(tuple(k.spec.anchor.info["shape"]) for k in kernels)
    assert shapes == [(5, 80, 3721), (5, 112, 961), (8, 3, 300, 121)]  # (8 slices of 576)
    assert sorted((k.spec.anchor.info["tensor_core"].block_n) for k in kernels) == [64, 64, 128]
    columns = sorted(
        tuple(int(d) for d in s.spec.buffer.shape)
        for s in compiled.steps
        if isinstance(s, BuiltKernel) and s.spec.buffer.name.endswith("im2col")
    )  # (batch, runs of 4 taps (padded to whole k steps of 32), positions (whole tiles), 4)
    assert columns == [(3, 1152, 128, 4), (5, 88, 3840, 4), (5, 232, 1024, 4)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_tf32_wgmma_kernels_compile_for_sm_90a(tmp_path):
    set_tf32(conv=True, matmul=False)
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=odd_convolutions)
    text = joined_sources({id(s.module): s.module for s in wgmma_kernels(compiled)}.values())
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in text
    assert "tf_cp_async_sw128<" in text  # (its float32 instance: the only tiles here)
    # ptxas checks the wgmma operands, descriptors' registers and the accumulators' count
    assert_compiles_with_nvcc(tmp_path, text, "sm_90a")


@pytest.mark.cuda
@TORCH_CUDA
def test_tf32_wgmma_convolutions_are_as_close_to_float64_as_eager():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma: sm_90 only")
    set_tf32(conv=True, matmul=False)
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=odd_convolutions)
    assert len(wgmma_kernels(compiled)) == 3 and not compiled.program.fallbacks
    reference = fn(*[t.double() for t in inputs])
    eager = fn(*inputs)  # cuDNN's TF32
    for _ in range(3):  # kernels one by one, then a CUDA graph
        got = compiled(list(inputs))
        torch.cuda.synchronize()
        for g, e, r in zip(got, eager, reference):
            ours, theirs = relative_error(g, r), relative_error(e, r)
            assert ours <= 2 * theirs + 1e-3, (ours, theirs)
