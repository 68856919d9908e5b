"""Half-precision products on tensor cores (graph/lower_tensor_core.py, schedules_tensor_core.py).

Here (no GPU): which products take them, the tile choice, and that graphs of such products
(odd row counts, bias + GELU, attention's batched products, residual epilogues) build to CUDA C
that nvcc compiles for sm_90. On a GPU: against an fp32 reference, no worse than eager's error.
"""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph.lower_tensor_core import (  # noqa: E402
    MIN_ROWS,
    choose_tiles,
    wants_tensor_cores,
)
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_tensor_core import SOURCE, STAGING_PAD, WGMMA_SOURCE  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import (  # noqa: E402
    assert_compiles_with_nvcc,
    compiled_for,
    joined_sources,
)

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
    # past 48 KiB the float32 tile takes the pipeline's bytes after the k loop (cuda_shared.py)
    staged = t.block_m * (t.block_n + STAGING_PAD) * 4
    apart = shared + staged
    assert (apart if apart <= 48 << 10 else max(shared, staged)) == t.shared_bytes() <= shared_limit
    assert t.block_m <= max(16, 2 * n)  # rows padded at most to twice their number


def test_a_computed_right_matrix_takes_tiles_that_divide_its_columns():
    """Attention's K^T and V are not padded: a 256-wide tile over 192 columns would read past
    them (96 heads x 192 x 192 would otherwise take 128 x 256 blocks)."""
    assert choose_tiles(96, 192, 192, 64, 132).block_n == 256
    assert 192 % choose_tiles(96, 192, 192, 64, 132, whole_columns=True).block_n == 0


def test_a_shared_memory_limit_no_tile_fits_is_a_clear_error():
    from tensorforge.errors import ScheduleError

    assert choose_tiles(1, 16, 64, 64, 132, shared_limit=24 << 10).block_m == 16
    with pytest.raises(ScheduleError, match="fits 8192 bytes of shared memory"):
        choose_tiles(1, 128, 768, 768, 132, shared_limit=8 << 10)


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


def half_convolutions(dtype=torch.float16):
    """3 x 3 + folded batch norm + ReLU at 13 x 11, strided, a 1 x 1 downsample plus residual,
    and an RGB stem (3 x 7 x 7 = 147 terms: padded to 160)."""

    def fn(x, w3, mean, var, gamma, beta, ws2, w1, img, stem):
        y = F.relu(F.batch_norm(F.conv2d(x, w3, padding=1), mean, var, gamma, beta))
        down = F.conv2d(y, ws2, stride=2, padding=1) + F.conv2d(y, w1, stride=2)
        return down, F.relu(F.conv2d(img, stem, stride=2, padding=3))

    gen = torch.Generator().manual_seed(0)
    shapes = [(2, 24, 13, 11), (40, 24, 3, 3), (40,), (40,), (40,), (40,), (72, 40, 3, 3),
              (72, 40, 1, 1), (1, 3, 30, 29), (64, 3, 7, 7)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    inputs[3] = inputs[3].abs() + 0.5  # a variance
    return fn, [t.to(dtype) for t in inputs], (1, 2, 3, 4, 5, 6, 7, 9)


def half_split_products(dtype=torch.float16):
    """Few output tiles over long reductions: 16 rows from 3072 terms, and ResNet's last stage
    at batch 1 (256 filters x 7 x 7 positions from 2304 terms): k splits across blocks."""

    def fn(x, w, img, cw):
        return F.relu(F.linear(x, w)), F.conv2d(img, cw, padding=1) + img

    gen = torch.Generator().manual_seed(0)
    shapes = [(16, 3072), (768, 3072), (1, 256, 7, 7), (256, 256, 3, 3)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 3)


def half_edge_products(dtype=torch.float16):
    """Edges of the tiles: 16 rows and one 16-term k step (no pipeline) into 3 columns, a
    batched product of one k step, and one output column over 257 16-term steps (a prime: k
    is not split, block_k 16)."""

    def fn(x, w, q, k, x2, w2):
        return F.linear(x, w) * 2.0, q @ k, F.linear(x2, w2)

    gen = torch.Generator().manual_seed(0)
    shapes = [(16, 16), (3, 16), (5, 16, 16), (5, 16, 64), (31, 4112), (1, 4112)]
    inputs = [torch.randn(*s, generator=gen) / 4 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 5)


def half_padded_products(dtype=torch.float16):
    """Batched products tensor cores do not take whole, on zero-padded copies: a Swin window's
    attention (49 tokens, head size 32, a relative-position bias: K^T's 49 columns and P V's
    49-term sums) and 40 x 40 @ 40 x 70 (40 terms: 48; 70 columns: 128)."""

    def fn(q, k, v, bias, a, b):
        att = torch.softmax(q @ k.transpose(-1, -2) + bias, -1) @ v
        return att, (a * 2.0) @ (b + 1.0)

    gen = torch.Generator().manual_seed(0)
    shapes = [(6, 3, 49, 32)] * 3 + [(3, 49, 49), (2, 40, 40), (2, 40, 70)]
    inputs = [torch.randn(*s, generator=gen) / 2 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], ()


def test_edge_products_take_one_stage_or_unsplit_k():
    _, _, compiled = compiled_for(SM90, graph=half_edge_products)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert [s.source for s in kernels] == [SOURCE] * 3
    tiles = [s.spec.anchor.info["tensor_core"] for s in kernels]
    assert [(t.block_k, t.stages) for t in tiles] == [(16, 1), (16, 1), (16, 3)]
    assert kernels[-1].spec.anchor.info["shape"] == (31, 1)  # not split: 4112 / 2 is no 16s


def test_few_tiles_over_long_reductions_split_k():
    _, _, compiled = compiled_for(SM90, graph=half_split_products)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    partials = [s for s in kernels if s.source in (SOURCE, WGMMA_SOURCE)]
    # 16 rows: thin mma.sync tiles; 256 filters: 64 x 64 wgmma blocks (split_wgmma_tiles)
    assert [s.source for s in partials] == [SOURCE, WGMMA_SOURCE]
    for step in partials:
        splits, *_ = step.spec.anchor.info["shape"]
        tiles = step.spec.anchor.info["tensor_core"]
        assert splits > 1 and step.spec.anchor.info["k"] % tiles.block_k == 0
    sums = [s for s in kernels if s.spec.anchor is not None and s.spec.anchor.kind == "reduce"]
    assert len(sums) == 2  # each sums its slices and applies the epilogue (ReLU, residual)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize(
    "graph, products",
    [(half_graph, 5), (half_convolutions, 4), (half_split_products, 1), (half_edge_products, 3),
     (half_padded_products, 3)],
)  # fmt: skip
def test_half_graph_builds_tensor_core_kernels_that_nvcc_compiles(tmp_path, graph, products):
    _, _, compiled = compiled_for(SM90, graph=graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    on_tensor_cores = [s for s in kernels if s.source == SOURCE]
    # the three linear layers (k = 96, 208: whole 16-term steps) and the two batched products;
    # the four convolutions; of the split products the 16-row one (the convolution: wgmma)
    assert len(on_tensor_cores) == products, [s.source for s in kernels]
    modules = {id(s.module): s.module for s in on_tensor_cores}.values()  # alike: shared
    # to a cubin, so ptxas checks the mma, ldmatrix and cp.async operands and the registers too
    assert_compiles_with_nvcc(tmp_path, joined_sources(modules))


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize(
    "graph",
    [half_graph, half_convolutions, half_split_products, half_edge_products, half_padded_products],
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_graph_on_the_gpu_is_as_close_to_fp32_as_eager(graph, dtype):
    assert_as_close_to_fp32_as_eager(lambda: graph(dtype))


def assert_as_close_to_fp32_as_eager(graph) -> None:
    """`graph`'s outputs on the GPU, against fp32 on the same values: at most twice eager's
    error, plus 2e-3 of the largest value."""
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=graph)
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
