"""Large half products on wgmma (sm_90) in the graph layer (graph/lower_tensor_core.py's
choose_wgmma_tiles and reads_whole_rows, schedules_tensor_core.py's wgmma branch).

Here (no GPU): which products take wgmma (sm_90 only; operands that are whole rows of buffers;
enough blocks of 64 x 64 or more to fill the SMs; 3+ k steps of 64), the tiles, and that the
kernels compile to sm_90a cubins. On an H100: against an fp32 reference, no worse than eager.
"""

import copy
import re
import shutil
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge import te  # noqa: E402
from tensorforge.graph import lower_tensor_core, lower_ws_product  # noqa: E402
from tensorforge.graph.lower_tensor_core import (  # noqa: E402
    SHARED_RESERVED,
    WGMMA_K,
    choose_wgmma_tiles,
    reads_whole_rows,
)
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_tensor_core import SOURCE, WGMMA_SOURCE  # noqa: E402
from tensorforge.graph.split_k import splits_to_fill  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import (  # noqa: E402
    assert_compiles_with_nvcc,
    compiled_for,
    joined_sources,
)
from tests.graph.test_tensor_core import assert_as_close_to_fp32_as_eager  # noqa: E402

SM90, SM80 = "cuda -arch=sm_90", "cuda -arch=sm_80"
LIMIT = 227 << 10


@pytest.mark.parametrize(
    "batch, n, m, k, tile",
    [
        (1, 2048, 3072, 768, (256, 192)),  # 128 blocks of 4 warpgroups: one wave
        (1, 2048, 2304, 768, (128, 192)),  # GPT-2's qkv: 192 blocks (256 rows: 96)
        (1, 4096, 640, 768, (128, 128)),  # 192 columns would pad 640 to 768
        (1, 2048, 768, 3072, (64, 128)),  # 96 blocks of 128 x 128 would idle SMs
        (16, 64, 3136, 576, (64, 128)),  # 64 filters: 128-row tiles would be half padding
        (1, 1000, 1536, 768, (64, 128)),  # rows padded to 1024
        (16, 256, 196, 2304, (64, 128)),  # 128 blocks: 7/8 of the SMs is enough
        (16, 512, 49, 4608, (64, 64)),  # 128 blocks of 64 x 64, not mma.sync
        (1, 128, 2304, 768, (64, 64)),  # 72 blocks at most: k split in 2
        (4, 512, 49, 4608, (64, 64)),  # 32 blocks: k split in 4
        (1, 64, 768, 256, None),  # 12 blocks: slices of 3+ k steps cannot fill the SMs
        (1, 32, 3072, 768, None),  # 32 rows: thin mma.sync tiles (and split k)
        (1, 2048, 3072, 160, None),  # k not whole 64-term steps
        (1, 2048, 3072, 128, None),  # 2 k steps: no room to keep one in flight
    ],
)
def test_wgmma_tiles_fill_the_sms_and_pad_little(batch, n, m, k, tile):
    t = choose_wgmma_tiles(batch, n, m, k, 132, LIMIT, whole_columns=False)
    if tile is None:
        assert t is None
        return
    assert (t.block_m, t.block_n) == tile and t.mma == "wgmma" and t.sync == "mbarrier_lag"
    assert t.warp_m == 16 and t.warp_n == t.block_n and t.block_k == WGMMA_K
    blocks = batch * -(-n // t.block_m) * -(-m // t.block_n)
    splits = max(1, splits_to_fill(blocks, k, 132, WGMMA_K))
    assert 3 <= t.stages <= k // splits // WGMMA_K and t.shared_bytes() <= LIMIT
    assert 8 * blocks * splits >= 7 * 132


def test_wgmma_tiles_of_a_computed_right_matrix_divide_its_columns():
    t = choose_wgmma_tiles(32, 256, 192, 256, 132, LIMIT, whole_columns=True)
    assert t is not None and 192 % t.block_n == 0
    assert choose_wgmma_tiles(1, 4096, 200, 256, 132, LIMIT, whole_columns=True) is None


def test_only_whole_rows_of_a_buffer_are_copied_into_swizzled_tiles():
    x = te.placeholder((64, 768), "float16", name="x")
    odd = te.placeholder((64, 12), "float16", name="odd")  # rows of 24 bytes: not aligned
    y = te.compute((64, 768), lambda i, j: x[i, j] * 2, name="y")
    assert reads_whole_rows(lambda idx: x[idx], 2)
    assert reads_whole_rows(lambda idx: x[te.min(idx[0], 63), idx[1]], 2)  # clamped rows
    assert not reads_whole_rows(lambda idx: x[idx[1], idx[0]], 2)  # transposed
    assert not reads_whole_rows(lambda idx: x[idx[0], idx[1] + 8], 2)  # an offset column
    assert not reads_whole_rows(lambda idx: x[idx[0] + idx[1], idx[1]], 2)  # skewed
    assert not reads_whole_rows(lambda idx: odd[idx], 2)
    assert not reads_whole_rows(lambda idx: y[idx], 2)  # computed on the way
    assert not reads_whole_rows(lambda idx: x[idx] * 2, 2)


def large_half_products(dtype=torch.float16):
    """Products that fill an H100 with wgmma blocks: 1000 rows (padded to whole tiles) through
    bias + GELU and a residual, a transposed left matrix (mma.sync: not whole rows), and a
    3 x 3 convolution + batch norm + ReLU at batch 8 over 48 x 48 positions."""

    def fn(x, w1, b1, w2, xt, w3, img, cw, mean, var, gamma, beta):
        h = F.gelu(F.linear(x, w1, b1))  # 1000 x 1536 from 768
        y = F.linear(h, w2) + x  # 1000 x 768 from 1536
        t = F.linear(xt.t(), w3)  # A read across its rows
        c = F.relu(F.batch_norm(F.conv2d(img, cw, padding=1), mean, var, gamma, beta))
        return y, t, c

    gen = torch.Generator().manual_seed(0)
    shapes = [(1000, 768), (1536, 768), (1536,), (768, 1536), (768, 1000), (1536, 768),
              (8, 64, 48, 48), (64, 64, 3, 3), (64,), (64,), (64,), (64,)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) / 4 for s in shapes]
    inputs[9] = inputs[9].abs() + 0.5  # a variance
    return fn, [t.to(dtype) for t in inputs], (1, 2, 3, 5, 7, 8, 9, 10, 11)


def product_sources(target):
    _, _, compiled = compiled_for(target, graph=large_half_products)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    return [s for s in kernels if s.source in (SOURCE, WGMMA_SOURCE)]


def shared_memory(kernel) -> int:
    """The bytes of shared memory the kernel's launch asks for."""
    return int(re.search(r"shared memory: (\d+) bytes", kernel.module.get_source("cuda"))[1])


def test_large_half_products_take_wgmma_on_sm90_only(monkeypatch):
    monkeypatch.setattr(lower_ws_product, "WS_PRODUCTS", False)  # (the scheduled kernel's
    # tiles: these products take the hand-written one, graph/lower_ws_product.py)
    sm90, sm80 = product_sources(SM90), product_sources(SM80)
    assert [s.source for s in sm90] == [WGMMA_SOURCE, WGMMA_SOURCE, SOURCE, WGMMA_SOURCE]
    assert [s.source for s in sm80] == [SOURCE] * 4
    # the tiles' count (swizzled or padded operand tiles, the float32 tile's padded rows) is
    # what the kernel takes: choose_tiles and choose_wgmma_tiles fit the tiles by it
    for kernel in sm90 + sm80:
        assert shared_memory(kernel) == kernel.spec.anchor.info["tensor_core"].shared_bytes()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_wgmma_products_compile_for_sm90a(tmp_path, monkeypatch):
    monkeypatch.setattr(lower_tensor_core, "TMA_FILLS", True)  # (test_wgmma_tma_graph.py's)
    kernels = [s for s in product_sources(SM90) if s.source == WGMMA_SOURCE]
    text = joined_sources({id(s.module): s.module for s in kernels}.values())
    assert "tf_wgmma_sync<16, 128, 64, 1, 0>" in text and "tf_tma_sw128<" in text  # (TMA_FILLS)
    assert_compiles_with_nvcc(tmp_path, text, arch="sm_90a")


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_wgmma_products_on_the_gpu_are_as_close_to_fp32_as_eager(dtype):
    assert_as_close_to_fp32_as_eager(lambda: large_half_products(dtype))


def test_wide_tiles_are_three_stages_deep_and_bulk_filled():
    """256 x 192 blocks (16 warps) stage 3 k steps, WGMMA_PIPELINE_BYTES' worth; both 192-column
    tiles are filled by bulk tensor copies whatever TMA_FILLS says, as measured."""
    wide = choose_wgmma_tiles(1, 2048, 3072, 768, 132, LIMIT, whole_columns=False)
    qkv = choose_wgmma_tiles(1, 2048, 2304, 768, 132, LIMIT, whole_columns=False)
    assert (wide.block_m, wide.block_n, wide.stages, wide.warps, wide.fill) == (256, 192, 3, 16, "tma")  # fmt: skip
    assert (qkv.block_m, qkv.block_n, qkv.stages, qkv.fill) == (128, 192, 4, "tma")
    stage = (wide.block_m + wide.block_n) * wide.block_k * 2
    assert 3 * stage <= lower_tensor_core.WGMMA_PIPELINE_BYTES < 4 * stage
    assert wide.shared_bytes() <= LIMIT  # (the float32 tile's 200 KiB is the larger part)
    conv = choose_wgmma_tiles(1, 2048, 3072, 768, 132, LIMIT, whole_columns=False, wide=False)
    assert (conv.block_m, conv.block_n, conv.fill) == (128, 128, "cp_async")  # (not measured)


def wide_half_products(dtype=torch.float16):
    """Products on 192-column wgmma tiles: 2000 rows (not whole tiles: the bulk copies bring
    zeros past them) through bias + GELU on 256 x 192 blocks, then 128 x 192 ones over that
    result (k of 45 steps) with a residual add."""

    def fn(x, w1, b1, w2, r):
        h = F.gelu(F.linear(x, w1, b1))  # 2000 x 2880 from 768
        return h, F.linear(h, w2) + r  # 2000 x 1536 from 2880

    gen = torch.Generator().manual_seed(7)
    shapes = [(2000, 768), (2880, 768), (2880,), (1536, 2880), (2000, 1536)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 2, 3)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_wide_products_take_192_column_tiles_and_compile(tmp_path, monkeypatch):
    monkeypatch.setattr(lower_ws_product, "WS_PRODUCTS", False)  # (the scheduled kernel's
    # tiles: these products take the hand-written one, graph/lower_ws_product.py)
    _, _, compiled = compiled_for(SM90, graph=wide_half_products)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.spec.anchor]
    tiles = [s.spec.anchor.info["tensor_core"] for s in kernels if s.source == WGMMA_SOURCE]
    assert [(t.block_m, t.block_n) for t in tiles] == [(256, 192), (128, 192)]
    text = joined_sources({id(s.module): s.module for s in kernels}.values())
    assert "tf_tma_sw128<256, 64, 1>" in text and "tf_tma_sw128<64, 192, 1>" in text
    assert_compiles_with_nvcc(tmp_path, text, arch="sm_90a")


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_wide_wgmma_products_on_the_gpu_are_as_close_to_fp32_as_eager(dtype):
    assert_as_close_to_fp32_as_eager(lambda: wide_half_products(dtype))


def batched_half_products(dtype=torch.float16):
    """bmm of two graph inputs (whole rows: wgmma on sm_90) with ReLU + 1, and one whose left
    matrix is read transposed (mma.sync)."""

    def fn(a, b, c):
        return torch.relu(torch.bmm(a, b)) + 1, torch.bmm(a.transpose(1, 2), c)

    gen = torch.Generator().manual_seed(3)
    shapes = [(32, 256, 256), (32, 256, 192), (32, 256, 128)]
    return fn, [(torch.randn(*s, generator=gen) / 4).to(dtype) for s in shapes], ()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_batched_products_of_whole_rows_take_wgmma(tmp_path):
    _, _, compiled = compiled_for(SM90, graph=batched_half_products)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert [s.source for s in kernels] == [WGMMA_SOURCE, SOURCE]
    assert_compiles_with_nvcc(tmp_path, joined_sources(s.module for s in kernels), "sm_90a")


@pytest.mark.cuda
@TORCH_CUDA
def test_batched_wgmma_products_on_the_gpu_are_as_close_to_fp32_as_eager():
    assert_as_close_to_fp32_as_eager(batched_half_products)


def split_half_products(dtype=torch.float16):
    """Products too small to give 7/8 of an H100's SMs a wgmma block: 64 and 256 rows of an
    MLP (k split, whose slices' partial sums a second kernel adds with the bias and GELU), and
    a 3 x 3 convolution of 512 filters over 7 x 7 positions at batch 2 (k split 8 ways)."""

    def fn(x, w1, b1, w2, img, cw):
        h = F.gelu(F.linear(x, w1, b1))
        return F.linear(h, w2), F.linear(h[:64], w2), F.relu(F.conv2d(img, cw, padding=1))

    gen = torch.Generator().manual_seed(5)
    shapes = [(256, 768), (3072, 768), (3072,), (768, 3072), (2, 512, 7, 7), (512, 512, 3, 3)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 2, 3, 5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_products_too_small_to_fill_the_sms_split_k_on_wgmma(tmp_path):
    _, _, compiled = compiled_for(SM90, graph=split_half_products)
    products = [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.spec.anchor]
    wgmma = [s for s in products if s.source == WGMMA_SOURCE]
    shapes = [s.spec.anchor.info["shape"] for s in wgmma]  # (slices of k first where split)
    assert shapes == [(256, 3072), (4, 256, 768), (16, 64, 768), (8, 2, 512, 49)]
    for kernel in wgmma:
        tiles = kernel.spec.anchor.info["tensor_core"]
        assert (tiles.block_m, tiles.block_n) == (64, 64)
        assert shared_memory(kernel) == tiles.shared_bytes()
    assert_compiles_with_nvcc(tmp_path, joined_sources({id(s.module): s.module for s in wgmma}.values()), "sm_90a")  # fmt: skip


@pytest.mark.cuda
@TORCH_CUDA
def test_split_wgmma_products_on_the_gpu_are_as_close_to_fp32_as_eager():
    assert_as_close_to_fp32_as_eager(split_half_products)


def test_wgmma_pipelines_are_as_deep_as_two_blocks_an_sm_allow():
    """The float32 tile takes the pipeline's bytes (codegen/cuda_shared.py), so a 128 x 128
    block fits twice an SM with 3 stages, a 64 x 128 one with 4; ptxas budgets registers so."""
    big = choose_wgmma_tiles(1, 4096, 640, 768, 132, LIMIT, whole_columns=False)
    small = choose_wgmma_tiles(1, 2048, 768, 3072, 132, LIMIT, whole_columns=False)
    assert (big.block_m, big.block_n, big.stages, big.blocks) == (128, 128, 3, 2)
    assert (small.block_n, small.stages, small.blocks) == (128, 4, 2)
    for tiles in (big, small):
        assert 2 * (tiles.shared_bytes() + SHARED_RESERVED) <= LIMIT + SHARED_RESERVED
        deeper = replace(tiles, stages=tiles.stages + 1)
        assert 2 * (deeper.shared_bytes() + SHARED_RESERVED) > LIMIT + SHARED_RESERVED


def test_an_input_off_a_16_byte_boundary_is_copied_for_the_gpu():
    from tensorforge.graph.call_plan import gpu_input

    base = torch.randn(64 * 96 + 3).to(torch.float16)
    view = base[3:].view(64, 96)  # starts 6 bytes into its storage
    moved = gpu_input(view)
    assert moved.data_ptr() % 16 == 0 and torch.equal(moved, view)
    whole = torch.randn(64, 96).to(torch.float16)
    assert gpu_input(whole).data_ptr() == whole.data_ptr()  # aligned: no copy


@pytest.mark.cuda
@TORCH_CUDA
def test_a_misaligned_input_view_reaches_wgmma_kernels_aligned():
    from tensorforge.graph import backend as tensorforge_backend

    torch.manual_seed(0)
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(768, 1536), torch.nn.GELU())
    model = model.eval().cuda().half()
    base = torch.randn(2048 * 768 + 3, device="cuda", dtype=torch.float16)
    x = base[3:].view(2048, 768)  # 6 bytes into its storage: 16-byte copies would fault
    with torch.no_grad():
        want = copy.deepcopy(model).float()(x.float())
        compiled = torch.compile(model, backend=tensorforge_backend)
        for _ in range(3):  # kernels one by one, then a CUDA graph
            got = compiled(x)
            torch.cuda.synchronize()
            assert ((got.float() - want).abs().max() / want.abs().max()).item() < 2e-3


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_wgmma_products_covering_seven_eighths_of_the_sms_are_not_split():
    # 1024 x 1920 on 64 x 128 tiles: 16 x 15 = 240 blocks; 256 x 1920: 4 x 30 = 120 of 64 x 64
    # (120 of 132 SMs: 7/8, one slice: k of 4 steps would split into slices of 2)
    def fn(x, w):
        return F.linear(x, w), F.linear(x[:256], w)

    gen = torch.Generator().manual_seed(9)
    inputs = [(torch.randn(*s, generator=gen) / 8).half() for s in ((1024, 256), (1920, 256))]
    _, _, compiled = compiled_for(SM90, graph=lambda dtype=None: (fn, inputs, (1,)))
    products = [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.spec.anchor]
    assert [s.source for s in products] == [WGMMA_SOURCE, WGMMA_SOURCE]
    assert [s.spec.anchor.info["shape"] for s in products] == [(1024, 1920), (256, 1920)]
