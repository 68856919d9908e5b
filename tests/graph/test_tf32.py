"""float32 products in TF32 on tensor cores (CUDA sm_80+), as torch's flags allow them
(graph/options.py's Float32Precision; lower_tensor_core.py with float32 operands).

Here (no GPU): which products take them (flag, dtype, target, k), that the flags are read when
a graph is compiled and are part of its cache key, that a CPU build is the same whatever the
flags, the tiles, and that graphs of such products build to CUDA C that nvcc compiles for sm_90
and sm_80. On a GPU: against a float64 reference, within twice eager's own error with the same
flags; with the flags off, exact float32 (the FMA schedules). tests/graph/conftest.py turns the
flags off around every test; the tests here turn them on where they mean to.
"""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, compile_aten, decompositions  # noqa: E402
from tensorforge.graph import backend as tensorforge_backend  # noqa: E402
from tensorforge.graph.cache import graph_key  # noqa: E402
from tensorforge.graph.lower_tensor_core import choose_tiles, wants_tensor_cores  # noqa: E402
from tensorforge.graph.options import Float32Precision  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.report import _tolerance, uses_tf32  # noqa: E402
from tensorforge.graph.schedules_tensor_core import SOURCE, STAGING_PAD  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import (  # noqa: E402
    assert_compiles_with_nvcc,
    compiled_for,
    joined_sources,
)
from tests.graph.test_tensor_core import (  # noqa: E402
    half_convolutions,
    half_edge_products,
    half_graph,
    half_split_products,
)

SM90 = "cuda -arch=sm_90"
NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def set_tf32(conv: bool, matmul: bool) -> None:
    """torch's two flags (conftest.py restores them after each test)."""
    torch.backends.cudnn.allow_tf32 = conv
    torch.backends.cuda.matmul.allow_tf32 = matmul


def odd_products():
    """k = 200 (25 8-term steps: k steps of 8) from 97 rows (a prime) into 13 columns with bias
    + GELU, one row (a matrix-vector product: FMA whatever the flags), a batched product of
    k = 56 (7 steps) over 67 rows, and a 3 x 3 convolution of 5 channels (45 terms, padded to
    48) + folded batch norm + ReLU at 11 x 7."""

    def fn(x, w, b, one, q, kt, img, cw, mean, var):
        lin = F.gelu(F.linear(x, w, b))
        conv = F.relu(F.batch_norm(F.conv2d(img, cw, padding=1), mean, var))
        return lin, F.linear(one, w), q @ kt, conv

    gen = torch.Generator().manual_seed(1)
    shapes = [(97, 200), (13, 200), (13,), (1, 200), (3, 67, 56), (3, 56, 64), (2, 5, 11, 7),
              (24, 5, 3, 3), (24,), (24,)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    inputs[-1] = inputs[-1].abs() + 0.5  # a variance
    return fn, inputs, (1, 2, 7, 8, 9)


def large_convolution():
    """A 3 x 3 convolution of 64 channels into 72 filters at 57 x 55, batch 4 (520M
    multiply-adds: past TF32_MIN_MACS), + folded batch norm + ReLU."""

    def fn(img, cw, mean, var):
        return (F.relu(F.batch_norm(F.conv2d(img, cw, padding=1), mean, var)),)

    gen = torch.Generator().manual_seed(2)
    shapes = [(4, 64, 57, 55), (72, 64, 3, 3), (72,), (72,)]
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    inputs[1] = inputs[1] / 24  # the outputs of the order of the inputs
    inputs[-1] = inputs[-1].abs() + 0.5  # a variance
    return fn, inputs, (1, 2, 3)


def fp32(graph):
    return lambda: graph(torch.float32)


# name: (graph, its products on tensor cores with both flags on, with convs only); convolutions
# of fewer than TF32_MIN_MACS multiply-adds keep float32's own schedules whatever the flags
GRAPHS = {
    "odd": (odd_products, 2, 0),
    "linear_gelu_attention": (fp32(half_graph), 5, 0),
    "conv_bn_relu": (fp32(half_convolutions), 0, 0),
    "large_conv": (large_convolution, 1, 1),
    "split_k": (fp32(half_split_products), 1, 0),
    "edges": (fp32(half_edge_products), 3, 0),
}


def tensor_core_kernels(compiled) -> list:
    return [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.source == SOURCE]


def test_float32_takes_tensor_cores_only_where_tf32_is_allowed():
    sm90, sm80, sm75 = Target(SM90), Target("cuda -arch=sm_80"), Target("cuda -arch=sm_75")
    assert wants_tensor_cores(sm90, "float32", (128, 768), 768, True, tf32=True)
    assert wants_tensor_cores(sm80, "float32", (128, 768), 200, True, tf32=True)  # 25 steps of 8
    assert not wants_tensor_cores(sm90, "float32", (128, 768), 768, True)  # the flag is off
    assert not wants_tensor_cores(sm75, "float32", (128, 768), 768, True, tf32=True)
    assert not wants_tensor_cores(Target("llvm"), "float32", (128, 768), 768, True, tf32=True)
    assert not wants_tensor_cores(sm90, "float32", (128, 768), 100, True, tf32=True)  # k % 8
    assert not wants_tensor_cores(sm90, "float64", (128, 768), 768, True, tf32=True)
    assert wants_tensor_cores(sm90, "float16", (128, 768), 768, True)  # halves: no flag needed


def test_the_precision_follows_torchs_flags_on_cuda_only():
    set_tf32(conv=True, matmul=False)
    assert Float32Precision.of(Target(SM90)) == Float32Precision(conv_tf32=True)
    set_tf32(conv=False, matmul=True)
    assert Float32Precision.of(Target(SM90)) == Float32Precision(matmul_tf32=True)
    torch.set_float32_matmul_precision("highest")
    assert not Float32Precision.of(Target(SM90)).matmul_tf32
    torch.set_float32_matmul_precision("high")
    assert Float32Precision.of(Target(SM90)).matmul_tf32
    set_tf32(conv=True, matmul=True)
    assert Float32Precision.of(Target("llvm")) == Float32Precision()  # float32 is float32


@pytest.mark.skipif(
    not hasattr(torch.backends.cudnn, "conv"), reason="torch < 2.9: the legacy flags only"
)
def test_the_precision_follows_torchs_per_operator_settings():
    """torch 2.9+'s fp32_precision settings: once set, reading the legacy flags raises."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    assert Float32Precision.of(Target(SM90)) == Float32Precision(matmul_tf32=True)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    assert Float32Precision.of(Target(SM90)) == Float32Precision(conv_tf32=True)
    torch.set_float32_matmul_precision("medium")  # (bfloat16 allowed: TF32 too)
    assert Float32Precision.of(Target(SM90)).matmul_tf32


def test_flipping_a_flag_changes_the_cache_key():
    gm = make_fx(lambda x, w: F.conv2d(x, w))(torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3))
    keys = {
        graph_key(gm, {}, Target(SM90), precision=Float32Precision(conv, matmul))
        for conv in (False, True)
        for matmul in (False, True)
    }
    assert len(keys) == 4
    assert graph_key(gm, {}, Target(SM90)) == graph_key(
        gm, {}, Target(SM90), precision=Float32Precision()
    )


@pytest.mark.parametrize("name", GRAPHS)
def test_the_flags_choose_the_products_on_tensor_cores(name):
    graph, both, convs_only = GRAPHS[name]
    counts = []
    for conv, matmul in ((True, True), (True, False), (False, False)):
        set_tf32(conv, matmul)
        _, _, compiled = compiled_for(SM90, graph=graph)
        kernels = tensor_core_kernels(compiled)
        assert all(k.spec.anchor.info["tensor_core"].dtype == "float32" for k in kernels)
        assert uses_tf32(compiled) == bool(kernels)
        counts.append(len(kernels))
    assert counts == [both, convs_only, 0]


@pytest.mark.parametrize("size, tf32", [(14, False), (28, True)])
def test_convolutions_take_tf32_from_2_26_multiply_adds(size, tf32):
    """ResNet's 3 x 3 convolutions of 128 channels at batch 1: 115M multiply-adds at 28 x 28,
    TF32 (H100, the model 331 -> 261 us of GPU time), 29M at 14 x 14, float32's schedules."""

    def graph():
        gen = torch.Generator().manual_seed(4)
        inputs = [torch.randn(1, 128, size, size, generator=gen), torch.randn(128, 128, 3, 3)]
        return (lambda x, w: (F.conv2d(x, w, padding=1),)), inputs, (1,)

    set_tf32(conv=True, matmul=False)
    _, _, compiled = compiled_for(SM90, graph=graph)
    assert len(tensor_core_kernels(compiled)) == int(tf32)


def test_a_cpu_build_is_the_same_whatever_the_flags():
    def sources():
        _, _, compiled = compiled_for("llvm", graph=odd_products)
        modules = {id(s.module): s.module for s in compiled.steps if isinstance(s, BuiltKernel)}
        return [m.get_source() for m in modules.values()]

    set_tf32(conv=False, matmul=False)
    exact = sources()
    set_tf32(conv=True, matmul=True)
    assert sources() == exact


@pytest.mark.parametrize("k", [768, 200, 56, 8])
@pytest.mark.parametrize("shared_limit", [227 << 10, 163 << 10, 99 << 10])
def test_tf32_tiles_stage_the_same_bytes_as_the_halves(k, shared_limit):
    t = choose_tiles(1, 2048, 3072, k, 132, shared_limit, dtype="float32")
    assert t.block_k == (16 if k % 16 == 0 else 8) and t.dtype == "float32"
    shared = (t.block_m * (t.block_k + 4) + t.block_k * (t.block_n + 8)) * 4 * t.stages
    # past 48 KiB the float32 tile takes the pipeline's bytes after the k loop (cuda_shared.py)
    staged = t.block_m * (t.block_n + STAGING_PAD) * 4
    apart = shared + staged
    assert (apart if apart <= 48 << 10 else max(shared, staged)) == t.shared_bytes() <= shared_limit
    if k % 16 == 0:  # 16 floats a row are 32 halves' bytes: the halves' tiles exactly
        half = choose_tiles(1, 2048, 3072, k * 2, 132, shared_limit)
        assert (t.block_m, t.block_n, t.stages) == (half.block_m, half.block_n, half.stages)


def test_check_holds_tf32_graphs_to_tf32s_rounding():
    opts = Options(check=True)
    assert _tolerance(opts, torch.float32) == 1e-4
    assert _tolerance(opts, torch.float32, tf32=True) == 4 * 2.0**-10
    assert _tolerance(Options(tolerance=1e-2), torch.float32, tf32=True) == 1e-2


@NVCC
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("name", [name for name, (_, both, _) in GRAPHS.items() if both])
def test_tf32_graphs_build_kernels_that_nvcc_compiles(tmp_path, name, arch):
    set_tf32(conv=True, matmul=True)
    graph, both, _ = GRAPHS[name]
    _, _, compiled = compiled_for(f"cuda -arch={arch}", graph=graph)
    kernels = tensor_core_kernels(compiled)
    assert len(kernels) == both
    text = joined_sources({id(s.module): s.module for s in kernels}.values())
    assert "tf_mma_sync_tf32<" in text and "tf_cp_async<16>" in text
    # to a cubin: ptxas checks the mma, ldmatrix and cp.async operands and the registers
    assert_compiles_with_nvcc(tmp_path, text, arch)


def relative_error(got, reference) -> float:
    return ((got.double() - reference).abs().max() / reference.abs().max()).item()


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("name", [name for name, (_, both, _) in GRAPHS.items() if both])
def test_tf32_graph_on_the_gpu_is_as_close_to_float64_as_eager(name):
    set_tf32(conv=True, matmul=True)
    graph = GRAPHS[name][0]
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=graph)
    assert uses_tf32(compiled) and not compiled.program.fallbacks
    reference = fn(*[t.double() for t in inputs])
    eager = fn(*inputs)  # with the same flags: cuDNN's and cuBLAS's TF32
    for _ in range(3):  # kernels one by one, then a CUDA graph
        got = compiled(list(inputs))
        torch.cuda.synchronize()
        for g, e, r in zip(got, eager, reference):
            assert g.shape == e.shape and g.dtype == torch.float32
            ours, theirs = relative_error(g, r), relative_error(e, r)
            # (1e-3: about two TF32 roundings, for a product eager runs in exact float32)
            assert ours <= 2 * theirs + 1e-3, (ours, theirs)


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("name", GRAPHS)
def test_with_the_flags_off_float32_stays_exact_on_the_gpu(name):
    set_tf32(conv=False, matmul=False)
    fn, inputs, compiled = compiled_for("cuda", "cuda", graph=GRAPHS[name][0])
    assert not uses_tf32(compiled) and not compiled.program.fallbacks
    reference = fn(*[t.double() for t in inputs])
    got = compiled(list(inputs))
    torch.cuda.synchronize()
    for g, r in zip(got, reference):
        assert relative_error(g, r) < 1e-5


@pytest.mark.cuda
@TORCH_CUDA
def test_check_holds_a_tf32_graph_to_tf32s_rounding_on_the_gpu():
    set_tf32(conv=True, matmul=True)
    fn, inputs, constants = fp32(half_graph)()
    inputs = [t.cuda() for t in inputs]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    checked = compile_aten(gm, inputs, {k: inputs[k] for k in constants}, Options(check=True))
    checked(list(inputs))
    assert checked.tf32 and checked.checks and checked.first_failure is None, checked.worst.error


@pytest.mark.cuda
@TORCH_CUDA
def test_flipping_the_matmul_flag_compiles_the_model_again():
    """Dynamo's global-state guard covers the matmul flag: the model is compiled again, and the
    backend reads the flag anew (exact float32, then TF32)."""
    torch._dynamo.reset()
    linear = torch.nn.Linear(64, 96).cuda().eval()
    x = torch.randn(32, 64, device="cuda")
    reference = torch.nn.functional.linear(x.double(), linear.weight.double(), linear.bias.double())
    compiled = torch.compile(linear, backend=tensorforge_backend)  # (entry point or not)
    with torch.no_grad():
        set_tf32(conv=True, matmul=False)
        exact = compiled(x)
        set_tf32(conv=True, matmul=True)
        tf32 = compiled(x)
    assert relative_error(exact, reference) < 1e-5
    assert 1e-5 < relative_error(tf32, reference) < 2e-3
