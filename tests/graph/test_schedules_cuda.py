"""The CUDA schedules of graph kernels (graph/schedules_cuda.py): register-tiled and split-K
products, convolutions as implicit GEMMs, a block per row for row operators.

Here (no GPU): the tile plans' invariants, and every kernel of a graph exercising each rule
lowers, builds to CUDA C and compiles with nvcc for sm_90. On a GPU: odd shapes against eager.
"""

import re
import shutil
import subprocess
import warnings

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.program import BuiltKernel, CompiledGraph  # noqa: E402
from tensorforge.graph.schedules_cuda import (  # noqa: E402
    SOURCES,
    THREADS,
    conv_plan,
    gemm_plan,
)
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402


@pytest.mark.parametrize(
    "batch, n, m, k",
    [(1, 1, 3072, 768), (1, 64, 768, 3072), (1, 128, 2304, 768), (12, 128, 128, 64),
     (1, 3, 100, 37), (1, 1, 1, 5), (5, 7, 13, 33), (1, 512, 49, 4608)],
)  # fmt: skip
def test_gemm_plans_fit_a_block_and_split_only_long_reductions(batch, n, m, k):
    plan = gemm_plan(batch, n, m, k)
    assert plan.tx * plan.ty * plan.kz <= THREADS
    assert plan.tx <= 32 and plan.vi in (1, 2, 4) and plan.vj in (1, 2, 4)
    assert plan.kz == 1 or k // plan.kz >= 16  # each slice still reduces a run of terms
    # tiles no wider than the matrix (rounded up to a power of two)
    assert plan.cols <= 2 * max(m, plan.vj) and plan.rows <= 2 * max(n, plan.vi)


def test_small_products_split_the_reduction_to_fill_the_gpu():
    assert gemm_plan(1, 1, 3072, 768).kz >= 16  # a matrix-vector product
    assert gemm_plan(1, 128, 768, 3072).kz > 1
    assert gemm_plan(1, 2048, 2048, 2048).kz == 1  # enough outputs already


@pytest.mark.parametrize(
    "N, F, OH, OW, C, window",
    [(1, 64, 112, 112, 3, 49), (1, 64, 56, 56, 64, 9), (1, 256, 14, 14, 256, 9),
     (1, 512, 7, 7, 512, 9), (1, 512, 7, 7, 256, 1), (3, 24, 4, 4, 16, 9),
     (2, 8, 15, 13, 3, 9), (1, 64, 15, 15, 64, 9), (1, 5, 1, 1, 7, 1)],
)  # fmt: skip
def test_conv_plans_fit_a_block_and_tile_whole_vectors(N, F, OH, OW, C, window):
    cp = conv_plan(N, F, OH, OW, C, window)
    plan = cp.plan
    # at most THREADS threads, so the shared partial tiles stay far under 48 KiB
    assert plan.tx * plan.ty * plan.kz <= THREADS
    assert plan.kz * plan.rows * cp.y_tile * cp.x_tile * 4 <= 48 * 1024
    assert plan.tx == cp.y_tile * cp.x_threads and cp.x_tile == min(OW, plan.vj * cp.x_threads)
    assert OW % plan.vj == 0 and 1 <= cp.y_tile <= OH
    assert plan.kz == 1 or C // plan.kz >= 2  # a slice reduces whole channels


def graph_of_every_rule():
    """Odd sizes: batch 3, hidden 100, 7 x 7 images, a long reduction, a matrix-vector product."""

    def fn(x, w1, b1, w2, v, q, kt, img, cw, cw_s2, cw_1x1, stem_w, stem_img, ln_w, ln_b):
        h = F.gelu(F.linear(x, w1, b1))  # 3 x 100 from 700 (split-K)
        gemv = F.linear(v, w2)  # 1 x 100 from 700
        att = torch.softmax(q @ kt, -1)  # bmm 5 x 7 x 13
        normed = F.layer_norm(h, (100,), ln_w, ln_b)
        conv = F.relu(F.conv2d(img, cw, padding=1))  # 3 x 16 x 7 x 7 -> 24 filters
        strided = F.conv2d(img, cw_s2, stride=2, padding=1)
        down = F.conv2d(img, cw_1x1, stride=2)
        stem = F.conv2d(stem_img, stem_w, stride=2, padding=3)
        return normed, gemv, att, conv, strided + down, stem

    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 700), (100, 700), (100,), (100, 700), (1, 700), (5, 7, 33), (5, 33, 13),
              (3, 16, 7, 7), (24, 16, 3, 3), (24, 16, 3, 3), (24, 16, 1, 1), (8, 3, 7, 7),
              (1, 3, 23, 23), (100,), (100,)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    constants = (1, 2, 3, 8, 9, 10, 11, 13, 14)
    return fn, inputs, constants


def compiled_for(target: str, device: str = "cpu", graph=graph_of_every_rule):
    fn, inputs, constants = graph()
    inputs = [t.to(device) for t in inputs]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in constants}
    return fn, inputs, compile_aten(gm, inputs, known, Options(target=target))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_each_cuda_rule_builds_and_compiles_with_nvcc(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90")
    assert isinstance(compiled, CompiledGraph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    used = {s.source for s in kernels}
    for rule in ("gemm", "gemm_split", "rows"):
        assert SOURCES[rule] in used, (rule, used)
    modules = {id(s.module): s.module for s in kernels}.values()  # kernels alike share one
    assert_compiles_with_nvcc(tmp_path, joined_sources(modules))


def assert_graph_matches_eager(graph, tolerance: float) -> None:
    """`graph` compiled for the GPU whole (no eager fallback), its calls against eager."""
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=graph)
    assert not compiled.program.fallbacks
    assert_matches_eager(fn, inputs, compiled, tolerance)


def assert_matches_eager(fn, inputs, compiled, tolerance: float) -> None:
    """Three calls (the first ones launch kernels one by one, later ones a CUDA graph), each
    output against eager torch: its shape, and its largest error relative to its largest value."""
    for _ in range(3):
        got = compiled(list(inputs))
        torch.cuda.synchronize()
        for g, e in zip(got, fn(*inputs)):
            assert g.shape == e.shape
            assert ((g - e).abs().max() / e.abs().max()).item() < tolerance


def joined_sources(modules) -> str:
    """The CUDA sources of built modules, one namespace each, as one translation unit; their
    #include lines go first, outside the namespaces (cuda_fp16.h declared inside the first
    namespace would leave __half2float undeclared in the others)."""
    sources = [m.get_source("cuda").splitlines() for m in modules]
    includes = dict.fromkeys(
        line for lines in sources for line in lines if line.startswith("#include")
    )
    bodies = [
        "\n".join(line for line in lines if not line.startswith("#include")) for lines in sources
    ]
    # (#undef: a source's include guards, e.g. ops/wgmma.py's TF_TENSOR_MAP, are its own)
    return "\n".join([*includes, *(f"#undef TF_TENSOR_MAP\nnamespace k{k} {{\n{b}\n}}" for k, b in enumerate(bodies))])  # fmt: skip


def assert_compiles_with_nvcc(tmp_path, text: str, arch: str = "sm_90") -> None:
    (tmp_path / "kernels.cu").write_text(text)
    result = subprocess.run(
        [
            "nvcc",
            f"-arch={arch}",
            "-cubin",  # ptxas too: operands, registers, shared memory
            "-o",
            str(tmp_path / "k.cubin"),
            str(tmp_path / "kernels.cu"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.cuda
@TORCH_CUDA
def test_each_cuda_rule_matches_eager():
    fn, inputs, compiled = compiled_for("cuda", "cuda")
    assert isinstance(compiled, CompiledGraph) and not compiled.program.fallbacks
    assert_matches_eager(fn, inputs, compiled, 1e-4)
    assert compiled._graph is not None


def large_product_graph():
    """A linear of 3.3 GFLOP at odd sizes (1031 rows, 769 -> 2053, + bias + GELU) beside a small
    one: the large one past STAGED_GEMM_FLOP, the small one not."""

    def fn(x, w, b, small_w):
        return F.gelu(F.linear(x, w, b)), F.linear(x[:5], small_w)

    gen = torch.Generator().manual_seed(3)
    shapes = [(1031, 769), (2053, 769), (2053,), (17, 769)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, inputs, (1, 2, 3)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_large_products_take_shared_memory_tiles(tmp_path):
    from tensorforge.graph.schedules import FIRST_GUESS

    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=large_product_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    by_anchor = {s.spec.anchor.info["shape"][-2]: s for s in kernels if s.spec.anchor}
    assert by_anchor[1031].source == FIRST_GUESS
    assert by_anchor[5].source in (SOURCES["gemm"], SOURCES["gemm_split"])
    text = by_anchor[1031].module.get_source("cuda")
    assert "__shared__" in text
    assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@TORCH_CUDA
def test_large_products_match_eager():
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=large_product_graph)
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = compiled(list(inputs))
        # its kernels take > 48 KiB of shared memory, which the graph's own handles must allow
        assert not [w for w in caught if "one by one" in str(w.message)]
        torch.cuda.synchronize()
        for g, e in zip(got, fn(*inputs)):
            assert g.shape == e.shape
            assert ((g - e).abs().max() / e.abs().max()).item() < 1e-4


def small_map_conv_graph():
    """Convolutions of few outputs, split over their reduction: 130 filters of 128 x 3 x 3 on
    a 7 x 7 map (+ bias, ReLU, an add after), a strided 1 x 1 to 200 channels, and a batch of 2
    at 5 x 5 whose 648 terms split in only 2."""

    def fn(img, w, b, w_down, img2, w_odd):
        y = F.relu(F.conv2d(img, w, b, padding=1))
        return y + 1.0, F.conv2d(img, w_down, stride=2), F.conv2d(img2, w_odd, padding=1)

    gen = torch.Generator().manual_seed(5)
    shapes = [(1, 128, 7, 7), (130, 128, 3, 3), (130,), (200, 128, 1, 1), (2, 72, 5, 5),
              (33, 72, 3, 3)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    for k in (1, 3, 5):  # weights of unit gain: outputs of the inputs' scale
        inputs[k] /= inputs[k][0].numel() ** 0.5
    return fn, inputs, (1, 2, 3, 5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_small_map_convolutions_split_the_reduction(tmp_path):
    from tensorforge.graph.schedules import FIRST_GUESS

    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=small_map_conv_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    partials = [s for s in kernels if s.spec.anchor and s.spec.anchor.info.get("split_k")]
    assert sorted(s.spec.anchor.info["shape"][0] for s in partials) == [2, 2, 16]
    assert all(s.source == FIRST_GUESS for s in partials)
    text = joined_sources(s.module for s in partials)
    assert "__shared__" in text
    assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@TORCH_CUDA
def test_small_map_convolutions_match_eager():
    torch.backends.cudnn.allow_tf32 = False
    assert_graph_matches_eager(small_map_conv_graph, 1e-4)


def strided_conv_graph():
    """A stride-2 3 x 3 convolution to a 14 x 14 map of more outputs than a split-K one has (4
    x 180 filters x 196: the direct schedule, its reduction split across each block): ResNet's
    layer-3 entry at batch 4, whose 14 rows took blocks of 9 (9 + 5) and whose 4 x 7 x 14
    outputs over 112 threads widened the shared partial tiles to a fifth filter (8 with the
    register tile), 2.6x the work (H100: 543 us of 1158 for the model)."""

    def fn(img, w):
        return (F.relu(F.conv2d(img, w, stride=2, padding=1)),)

    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(4, 40, 27, 27, generator=gen), torch.randn(180, 40, 3, 3, generator=gen)]
    inputs[1] /= inputs[1][0].numel() ** 0.5
    return fn, inputs, (1,)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_strided_convolution_computes_only_its_block_tiles(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=strided_conv_graph)
    (conv,) = [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.spec.anchor]
    assert conv.source == SOURCES["gemm_split"]
    cp = conv_plan(4, 180, 14, 14, 40, 9)
    assert cp.y_tile == 7  # 14 rows in two blocks of 7
    text = conv.module.get_source("cuda")
    shared = int(re.search(r"shared memory: (\d+) bytes", text).group(1))
    # the partial tiles are the block's outputs x the slices, nothing past them
    assert shared == cp.plan.kz * cp.plan.rows * cp.y_tile * cp.x_tile * 4
    assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@TORCH_CUDA
def test_a_strided_convolution_matches_eager():
    torch.backends.cudnn.allow_tf32 = False
    assert_graph_matches_eager(strided_conv_graph, 1e-4)


def head_projection_graph():
    """GPT-2's attention output projection at 32 x 128 tokens: the heads' output (32, 12, 128,
    64) read through transpose(1, 2).reshape(32, 128, 768), then a linear 768 -> 768 (4.8 GFLOP:
    past STAGED_GEMM_FLOP)."""
    batch, heads, tokens, width = 32, 12, 128, 64

    def fn(attn, w, b):
        rows = attn.transpose(1, 2).reshape(batch, tokens, heads * width)
        return F.linear(rows, w, b)

    gen = torch.Generator().manual_seed(5)
    shapes = [(batch, heads, tokens, width), (heads * width, heads * width), (heads * width,)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, inputs, (1, 2)


def test_a_product_read_through_a_head_transpose_takes_shared_memory_tiles(tmp_path):
    # bound inference reads the activation's tile at head (16*k + 15) // 64 of its k slice k,
    # now k // 4: a constant 128 x 16 tile. Not folded, the tile had no constant size, the
    # staged kernel failed to build and the product fell back to register tiles
    from tensorforge.graph.schedules import FIRST_GUESS

    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=head_projection_graph)
    (kernel,) = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert kernel.source == FIRST_GUESS
    text = kernel.module.get_source("cuda")
    assert re.search(r"__shared__ __align__\(16\) float attn\w*_shared\[2048\];", text)
    # its k slices of 16 are 16 consecutive elements of one head's row of 64: 16-byte fills
    assert re.search(r"(float4\*>\(|tf_cp_async<16>\()&attn\w*_shared", text)
    # the k loop reads the tile at (row)*64 + k: no quotient or remainder of the k slice
    products = [line for line in text.splitlines() if line.count("_shared[") == 2]
    assert products and not [line for line in products if "k_outer" in line]
    if shutil.which("nvcc"):
        assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@TORCH_CUDA
def test_a_product_read_through_a_head_transpose_matches_eager():
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=head_projection_graph)
    got = compiled(list(inputs))[0]
    torch.cuda.synchronize()
    want = fn(*inputs)
    assert got.shape == want.shape
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-4


def split_product_graph():
    """A linear of few output tiles and enough work to split (2 x 64 tokens, 768 -> 2304, +
    bias + GELU: 0.45 GFLOP in 72 tiles of 64 x 64), as GPT-2's QKV."""

    def fn(x, w, b):
        return (F.gelu(F.linear(x, w, b)),)

    gen = torch.Generator().manual_seed(7)
    inputs = [torch.randn(2, 64, 768, generator=gen), torch.randn(2304, 768, generator=gen) / 28,
              torch.randn(2304, generator=gen)]  # fmt: skip
    return fn, inputs, (1, 2)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_products_of_few_tiles_split_the_reduction(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=split_product_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    (partial,) = [s for s in kernels if s.spec.anchor and s.spec.anchor.info.get("split_k")]
    assert partial.spec.anchor.info["shape"] == (2, 128, 2304)  # 2 slices of the 128 rows
    assert_compiles_with_nvcc(tmp_path, partial.module.get_source("cuda"))


@pytest.mark.cuda
@TORCH_CUDA
def test_products_of_few_tiles_match_eager():
    torch.backends.cuda.matmul.allow_tf32 = False
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=split_product_graph)
    assert not compiled.program.fallbacks
    for _ in range(3):
        (got,) = compiled(list(inputs))
        torch.cuda.synchronize()
        (expected,) = fn(*inputs)
        assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-4


def rms_norm_graph():
    """RMSNorm at odd sizes (3 x 37 rows of 300), and a plain row mean: reductions along rows
    read back by their epilogue, a block per row."""

    def fn(x, w):
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return x * rms * w, x.mean(-1, keepdim=True) * 2.0

    gen = torch.Generator().manual_seed(11)
    return fn, [torch.randn(3, 37, 300, generator=gen), torch.randn(300, generator=gen)], (1,)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_row_reductions_take_a_block_per_row(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=rms_norm_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    reductions = [s for s in kernels if s.spec.anchor and s.spec.anchor.kind == "reduce"]
    assert reductions and all(s.source == SOURCES["rows"] for s in reductions)
    text = joined_sources(s.module for s in reductions)
    assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@TORCH_CUDA
def test_row_reductions_match_eager():
    assert_graph_matches_eager(rms_norm_graph, 1e-5)


def long_rows_graph():
    """Row operators of few long rows (graph/lower_split_rows.py): group norms at batch 1 as a
    UNet's (64 x 32 x 32 in 8 groups + SiLU; 320 x 64 x 64 in 32 groups of 1000 + noise), and a
    softmax, log-softmax, layer norm and mean along one row of 65537 (a prime: a short last
    chunk), a sum over each of 64 channels' 32 x 32 positions."""

    def fn(x, w, b, y, w2, b2, row, ln_w):
        return (
            F.silu(F.group_norm(x, 8, w, b)),
            F.group_norm(y, 32, w2, b2),
            torch.softmax(row, -1),
            torch.log_softmax(row, -1),
            F.layer_norm(row, (row.shape[-1],), ln_w),
            row.mean() * 2.0,
            x.sum((2, 3)),
        )

    gen = torch.Generator().manual_seed(13)
    shapes = [(1, 64, 32, 32), (64,), (64,), (1, 320, 64, 64), (320,), (320,), (1, 65537),
              (65537,)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    inputs[3] += 1000.0
    return fn, inputs, (1, 2, 4, 5, 7)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_few_long_rows_split_in_chunks(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=long_rows_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    chunks = [s for s in kernels if s.spec.name.endswith("_chunks")]
    # (1, 8) rows of 8192 in 16 chunks, (1, 32) of 40960 in 64, 65537 terms in 128 (4 kernels),
    # (1, 64) of 1024 in 2
    counts = sorted(s.spec.anchor.info["shape"][-2] for s in chunks)
    assert counts == [2, 16, 64, 128, 128, 128, 128]
    assert all(s.source == SOURCES["rows"] for s in chunks)
    combined = [s for s in kernels if s.source == SOURCES["split_rows"]]
    assert len(combined) == 7
    modules = {id(s.module): s.module for s in chunks + combined}.values()  # alike: shared
    assert_compiles_with_nvcc(tmp_path, joined_sources(modules))


@pytest.mark.cuda
@TORCH_CUDA
def test_few_long_rows_match_eager():
    assert_graph_matches_eager(long_rows_graph, 1e-4)


def unet_block_graph():
    """The zoo's UNet block as benchmarks/torch_zoo.py runs it (64 channels, 8 groups, batch 1):
    its two group norms are 8 rows of 8K and of 64K terms."""
    from torch.func import functional_call

    from tests.graph import zoo_models as zoo

    torch.manual_seed(0)
    model = zoo.randomize_norms(zoo.UNetBlock(64, 8)).eval()
    state = {name: p.detach() for name, p in model.named_parameters()}
    names = list(state)

    def fn(x, skip, *weights):
        return (functional_call(model, dict(zip(names, weights)), (x, skip)),)

    gen = torch.Generator().manual_seed(17)
    images = [torch.randn(1, 64, 32, 32, generator=gen), torch.randn(1, 64, 64, 64, generator=gen)]
    inputs = images + [state[n] for n in names]
    return fn, inputs, tuple(range(2, len(inputs)))


def test_unet_block_group_norms_split_in_chunks():
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=unet_block_graph)
    assert not compiled.program.fallbacks
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    chunks = [s.spec.anchor.info["shape"] for s in kernels if s.spec.name.endswith("_chunks")]
    assert chunks == [(1, 8, 16, 2), (1, 8, 128, 2)]
    assert len([s for s in kernels if s.source == SOURCES["split_rows"]]) == 2


@pytest.mark.cuda
@TORCH_CUDA
def test_unet_block_matches_eager():
    torch.backends.cudnn.allow_tf32 = False
    assert_graph_matches_eager(unet_block_graph, 1e-4)


@pytest.mark.parametrize(
    "shape, launch",
    [
        ((3, 256), "grid=(1, 3, 1) block=(64, 1, 1)"),  # rows of exactly 64 float4s
        ((3, 128), "grid=(1, 1, 1) block=(256, 1, 1)"),  # 32: one-warp blocks, flattened
        ((2, 268), "grid=(1, 2, 1) block=(67, 1, 1)"),  # 67 vectors (a prime): a block a row
        ((2, 3, 768), "grid=(1, 6, 1) block=(192, 1, 1)"),  # leading dims fused into grid y
        ((1, 1, 4096), "grid=(4, 1, 1) block=(256, 1, 1)"),  # one row
        ((2, 1028), "grid=(3, 1, 1) block=(256, 1, 1)"),  # 257 vectors, a prime: flattened
        ((4096,), "grid=(4, 1, 1) block=(256, 1, 1)"),  # 1-D: flattened
        ((70000, 128), "grid=(8750, 1, 1) block=(256, 1, 1)"),  # past grid y's 65535: flattened
    ],
)
def test_element_wise_kernels_take_a_block_row_per_row_where_it_fits(shape, launch):
    x = torch.randn(*shape)
    gm = make_fx(lambda x: (torch.sigmoid(x) * 3,), decomposition_table=decompositions())(x)
    compiled = compile_aten(gm, [x], {}, Options(target="cuda -arch=sm_90"))
    (kernel,) = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert kernel.source == SOURCES["elementwise"]
    assert launch in kernel.module.get_source("cuda")


def channel_sums_graph():
    """Batch norm's reductions in training and its backward: per-channel sums and moments over
    batch and positions (3 x 17 x 19: 969 terms, odd), a weighted sum as the backward's, a
    reduction over a long first axis (1000 x 7), and a short one that keeps a thread per
    output (8 terms)."""

    def fn(x, g, t, short):
        var, mean = torch.var_mean(x, (0, 2, 3), correction=0)
        return (
            var, mean, (g * (x - mean[:, None, None])).sum((0, 2, 3)),
            t.sum(0), short.sum(1),
        )  # fmt: skip

    gen = torch.Generator().manual_seed(17)
    shapes = [(3, 5, 17, 19), (3, 5, 17, 19), (1000, 7), (64, 8)]
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    inputs[0] += 100.0  # a mean far from zero: the moments' sums must not lose it
    return fn, inputs, ()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_few_long_reductions_take_a_block_per_output(tmp_path):
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=channel_sums_graph)
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    reductions = [s for s in kernels if s.spec.anchor and s.spec.anchor.kind == "reduce"]
    sources = [s.source for s in reductions]
    assert sources.count(SOURCES["block_reduction"]) == len(sources) - 1, sources
    assert SOURCES["simple"] in sources  # the 8-term sums
    assert_compiles_with_nvcc(tmp_path, joined_sources(s.module for s in kernels))


@pytest.mark.cuda
@TORCH_CUDA
def test_few_long_reductions_match_eager():
    assert_graph_matches_eager(channel_sums_graph, 1e-5)
