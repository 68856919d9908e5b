"""float16 and bfloat16 graphs for CUDA: built on this machine and compiled with nvcc (no GPU
needed), each kernel computing in float32 over half-precision storage; on a GPU, the models
against eager as in test_half_precision (float32 reference on the same half values)."""

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.func import functional_call  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_cuda import SOURCES  # noqa: E402
from tests.graph import zoo_models as zoo  # noqa: E402
from tests.graph.models import MLP, Block, SmallCNN  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_half_precision import HALF, check_half  # noqa: E402
from tests.graph.test_schedules_cuda import assert_compiles_with_nvcc, joined_sources  # noqa: E402

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

MODELS = {  # name: (model, input shapes)
    "mlp_4099": (lambda: MLP(4099, 13, 10), [(3, 4099)]),
    "gpt2_block": (lambda: Block(32, 4), [(2, 7, 32)]),
    "conv_bn_relu": (SmallCNN, [(2, 3, 15, 13)]),
    "mobilenet_v2": (lambda: zoo.MobileNetV2Blocks(8), [(1, 8, 15, 17)]),
    "llama": (lambda: zoo.LlamaBlock(32, 4, 88), [(1, 129, 32)]),
    "unet": (lambda: zoo.UNetBlock(8, 4), [(1, 8, 15, 17), (1, 8, 30, 34)]),
    "group_norm_long_rows": (lambda: nn.GroupNorm(8, 32), [(1, 32, 64, 64)]),  # split rows
}

# a local of a 16-bit float type, or half arithmetic: a kernel computing in half precision
# (shared tiles of half values, which tensor-core products stage, are storage)
HALF_MATH = re.compile(
    r"^(?!\s*__shared__).*\b(half|__nv_bfloat16)\s+\w+(\[\d+\])?\s*[=;]|__h(add|sub|mul|div|fma)\b",
    re.M,
)


def kernels_for_cuda(model, shapes, dtype):
    """The model's graph in `dtype` (weights as constants) built for sm_90 on this machine."""
    model = zoo.randomize_norms(model).eval().to(dtype)
    state = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names = list(state)

    def fn(*tensors):
        weights = dict(zip(names, tensors[len(shapes) :]))
        return functional_call(model, weights, tuple(tensors[: len(shapes)]))

    generator = torch.Generator().manual_seed(0)
    inputs = [torch.randn(s, generator=generator).to(dtype) for s in shapes]
    inputs += [state[n].detach() for n in names]
    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in range(len(shapes), len(inputs))}
    compiled = compile_aten(gm, inputs, known, Options(target="cuda -arch=sm_90"))
    assert compiled.program.fallbacks == []
    return [s for s in compiled.steps if isinstance(s, BuiltKernel)]


@NVCC
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_half_models_compile_with_nvcc(name, dtype, tmp_path):
    make, shapes = MODELS[name]
    kernels = kernels_for_cuda(make(), shapes, dtype)
    text = joined_sources({id(k.module): k.module for k in kernels}.values())
    assert HALF_MATH.search(text) is None, HALF_MATH.search(text)
    assert ("__nv_bfloat16" if dtype is torch.bfloat16 else "half*") in text
    assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.parametrize("dtype", HALF)
def test_half_rows_split_with_float32_chunk_statistics(dtype):
    make, shapes = MODELS["group_norm_long_rows"]  # 8 rows of 16K terms: 32 chunks of 512
    kernels = kernels_for_cuda(make(), shapes, dtype)
    (chunks,) = [k.spec for k in kernels if "_chunks" in k.spec.name]
    assert chunks.buffer.dtype == "float32" and chunks.out.shape[-2].value == 32
    assert kernels[-1].spec.buffer.dtype == str(dtype).removeprefix("torch.")


@NVCC
@pytest.mark.parametrize("dtype", HALF)
def test_half_element_wise_kernels_move_8_lanes_a_thread(dtype, tmp_path):
    fn, inputs = element_wise_graph(dtype)
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target="cuda -arch=sm_90"))
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    assert [k.source for k in kernels] == [SOURCES["elementwise"]] * 2
    text = joined_sources(k.module for k in kernels)
    # 8 lanes a thread: each of the 64 rows of 4096 outputs in 2 blocks of 256 threads
    assert text.count("grid=(2, 64, 1) block=(256, 1, 1)") == 2
    assert text.count("16-byte store") == 2 and HALF_MATH.search(text) is None
    assert_compiles_with_nvcc(tmp_path, text)


def element_wise_graph(dtype):
    def fn(x, y, b):
        return torch.sigmoid(x) * y + 2.0, torch.nn.functional.gelu(x + b)

    generator = torch.Generator().manual_seed(2)
    inputs = [torch.randn(64, 4096, generator=generator).to(dtype) for _ in range(2)]
    return fn, inputs + [torch.randn(4096, generator=generator).to(dtype)]


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", HALF)
def test_half_element_wise_kernels_match_eager_on_the_gpu(dtype):
    fn, inputs = element_wise_graph(dtype)
    inputs = [t.cuda() for t in inputs]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target="cuda"))
    references = fn(*[t.double() for t in inputs])
    for got, expected, reference in zip(compiled(inputs), fn(*inputs), references):
        assert got.dtype == dtype and got.shape == expected.shape
        ours = ((got.double() - reference).abs().max() / reference.abs().max()).item()
        eagers = ((expected.double() - reference).abs().max() / reference.abs().max()).item()
        assert ours <= 2 * eagers + torch.finfo(dtype).eps / 8


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_half_models_match_eager_on_the_gpu(name, dtype, capsys, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")
    make, shapes = MODELS[name]
    torch.manual_seed(1)
    check_half(make(), *[torch.randn(s) for s in shapes], dtype=dtype, capsys=capsys, device="cuda")
