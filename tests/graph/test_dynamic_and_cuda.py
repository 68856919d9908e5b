"""One symbolic batch dimension (no recompile for a new batch size), and the CUDA path: kernels
generated for sm_90 compile with the local nvcc; on a GPU, models match eager torch."""

import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, backend, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.program import CompiledGraph  # noqa: E402
from tests.graph.models import MLP, Block, SmallCNN, randomize_batch_norms  # noqa: E402


@pytest.mark.parametrize(
    "model, make",
    [
        (MLP, lambda b: torch.randn(b, 37)),
        (Block, lambda b: torch.randn(b, 7, 32)),
        (lambda: randomize_batch_norms(SmallCNN(channels=16)), lambda b: torch.randn(b, 3, 11, 9)),
    ],
    ids=["mlp", "block", "cnn"],
)
def test_a_new_batch_size_runs_without_recompiling(model, make):
    torch.manual_seed(0)
    model = model().eval()
    compiled = []

    def counting(gm, example_inputs, **kwargs):
        compiled.append(backend(gm, example_inputs, **kwargs))
        return compiled[-1]

    with torch.no_grad():
        torch._dynamo.reset()
        fast = torch.compile(model, backend=counting)
        for batch in (3, 5, 2):
            x = make(batch)
            torch._dynamo.mark_dynamic(x, 0)
            got, expected = fast(x), model(x)
            assert got.shape == expected.shape
            assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-5
    assert len(compiled) == 1


def test_row_operators_of_a_symbolic_row_length_match_eager():
    # rows known only at run time: vector accumulators with a masked last step (rows of 197,
    # 37, 16 and 3 through the same kernel), NaN and -inf rows included
    def fn(x):
        return torch.softmax(x * 0.5, -1), F.layer_norm(x, x.shape[-1:]), x.amax(-1)

    torch._dynamo.reset()
    fast = torch.compile(fn, backend="tensorforge", dynamic=True)
    for shape in [(2, 5, 197), (3, 4, 37), (1, 2, 16), (2, 3, 3)]:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(shape[-1])) * 3
        x[0, -1, 1] = float("nan")
        x[-1, 0] = float("-inf")
        for got, expected in zip(fast(x), fn(x)):
            assert torch.allclose(got, expected, atol=1e-5, equal_nan=True), shape


def test_symbolic_sizes_become_kernel_arguments():
    torch.manual_seed(0)
    model = MLP().eval()
    with torch.no_grad():
        torch._dynamo.reset()
        graphs = []

        def keep(gm, example_inputs, **kwargs):
            graphs.append(backend(gm, example_inputs, **kwargs))
            return graphs[-1]

        torch.compile(model, backend=keep, dynamic=True)(torch.randn(4, 37))
    (compiled,) = graphs
    # aot_autograd wraps the compiled graph; find ours through the wrapper's closure
    found = _find_compiled(compiled)
    assert found is not None and found.program.symbols.var_names()


def _find_compiled(fn, depth=0):
    if isinstance(fn, CompiledGraph):
        return fn
    if depth > 6:
        return None
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found = _find_compiled(cell.cell_contents, depth + 1)
        except ValueError:
            continue
        if found is not None:
            return found
    for attr in ("compiled_fn", "__wrapped__", "fn", "compiled"):  # (compiled: DynamoCallable)
        inner = getattr(fn, attr, None)
        if inner is not None and inner is not fn:
            found = _find_compiled(inner, depth + 1)
            if found is not None:
                return found
    return None


# -- CUDA ---------------------------------------------------------------------------------------


def cuda_graph():
    def fn(x, w, b, img, cw):
        h = F.gelu(F.linear(x, w, b))
        normed = F.layer_norm(torch.softmax(h, -1), (19,))
        pooled = F.max_pool2d(F.relu(F.conv2d(img, cw, padding=1)), 2)
        return normed, pooled.mean((2, 3)), h.sum(-1), h.sum()

    gen = torch.Generator().manual_seed(0)
    shapes = [(7, 13), (19, 13), (19,), (1, 3, 9, 9), (4, 3, 3, 3)]
    inputs = [torch.randn(*s, generator=gen) for s in shapes]
    return fn, inputs, (1, 2, 4)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_kernels_compile_with_nvcc(tmp_path):
    fn, inputs, constants = cuda_graph()
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in constants}
    compiled = compile_aten(gm, inputs, known, Options(target="cuda -arch=sm_90"))
    assert isinstance(compiled, CompiledGraph)
    modules = {id(s.module): s.module for s in compiled.steps if hasattr(s, "module")}
    sources = [m.get_source("cuda") for m in modules.values()]  # kernels alike share one
    assert len(sources) >= 6
    # each kernel in a namespace of its own, so their shared helpers do not collide: one nvcc run
    text = "\n".join(f"namespace k{k} {{\n{src}\n}}" for k, src in enumerate(sources))
    (tmp_path / "graph.cu").write_text(text)
    result = subprocess.run(
        [
            "nvcc",
            "-arch=sm_90",
            "--ptx",
            "-o",
            str(tmp_path / "graph.ptx"),
            str(tmp_path / "graph.cu"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


TORCH_CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="this torch build has no CUDA (torch==2.13.0 is CPU)"
)


@pytest.mark.cuda
@TORCH_CUDA
def test_cuda_graph_matches_eager():
    fn, inputs, constants = cuda_graph()
    inputs = [t.cuda() for t in inputs]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    known = {k: inputs[k] for k in constants}
    compiled = compile_aten(gm, inputs, known, Options())
    assert isinstance(compiled, CompiledGraph) and compiled.target.kind == "cuda"
    got = compiled(list(inputs))
    torch.cuda.synchronize()
    for g, e in zip(got, fn(*inputs)):
        assert g.device.type == "cuda"
        assert ((g - e).abs().max() / e.abs().max()).item() < 1e-4


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize(
    "model, shape", [(MLP, (5, 37)), (SmallCNN, (2, 3, 15, 13)), (Block, (2, 7, 32))]
)
def test_cuda_models_match_eager(model, shape):
    torch.manual_seed(0)
    model = randomize_batch_norms(model()).eval().cuda()
    x = torch.randn(*shape, device="cuda")
    with torch.no_grad():
        torch._dynamo.reset()
        got = torch.compile(model, backend=backend)(x)
        expected = model(x)
    torch.cuda.synchronize()
    assert ((got - expected).abs().max() / expected.abs().max()).item() < 1e-4


def test_a_matrix_product_of_a_run_time_row_count_matches_eager():
    # full row tiles unguarded, the last partial tile peeled: row counts around a tile (12 on
    # AVX-512, fewer elsewhere) and below it
    lin = torch.nn.Linear(40, 70).eval()

    def fn(x):
        return F.gelu(lin(x))

    torch._dynamo.reset()
    with torch.no_grad():
        fast = torch.compile(fn, backend="tensorforge", dynamic=True)
        for rows in (64, 13, 12, 11, 1, 25):
            x = torch.randn(rows, 40, generator=torch.Generator().manual_seed(rows))
            got, expected = fast(x), fn(x)
            assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5), rows


def test_symbolic_sizes_passed_as_arguments_keep_a_cuda_graph_away():
    """A CUDA graph bakes in its launches' grids: a graph whose sizes come as arguments (every
    symbol of dynamic=True) launches its kernels one by one (built here without a GPU)."""
    lin = torch.nn.Linear(37, 20).eval()
    with torch.no_grad():
        torch._dynamo.reset()
        graphs = []

        def keep(gm, example_inputs, **kwargs):
            graphs.append(backend(gm, example_inputs, options={"target": "cuda -arch=sm_90"}))
            return graphs[-1]

        try:
            torch.compile(lin, backend=keep, dynamic=True)(torch.randn(4, 37))
        except Exception:  # without a GPU the call itself cannot run; the build is what counts
            pass
    found = _find_compiled(graphs[0]) if graphs else None
    assert found is not None and found.program.symbols.var_names()
    assert not found.use_cuda_graph


@pytest.mark.cuda
@TORCH_CUDA
def test_dynamic_sizes_on_the_gpu_match_eager():
    """dynamic=True on CUDA: one compile, row counts and lengths changing every call."""
    lin = torch.nn.Linear(37, 20).cuda().eval()

    def fn(x):
        return torch.softmax(F.gelu(lin(x)), -1)

    torch._dynamo.reset()
    with torch.no_grad():
        fast = torch.compile(fn, backend=backend, dynamic=True)  # (not installed on the GPU)
        for rows in (64, 13, 3, 130, 2, 64):
            x = torch.randn(rows, 37, generator=torch.Generator().manual_seed(rows)).cuda()
            got, expected = fast(x), fn(x)
            torch.cuda.synchronize()
            assert torch.allclose(got, expected, atol=1e-5, rtol=1e-5), rows


def nan_min_max(x, y):
    # each reads the NaNs: reductions over rows (warp shuffles), element-wise max / min, clamp
    return (
        x.amax(-1),
        x.amin(0),
        torch.maximum(x, y),
        torch.minimum(x, y),
        x.clamp(-0.5, 0.5),
        torch.relu(x),
        x.max(-1).values,
    )


def nan_inputs(dtype, device="cpu"):
    x = torch.randn(6, 37, generator=torch.Generator().manual_seed(3)).to(dtype)
    y = torch.randn(6, 37, generator=torch.Generator().manual_seed(4)).to(dtype)
    x[1, 5] = x[4, 36] = float("nan")
    y[2, 7] = float("nan")
    return x.to(device), y.to(device)


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_max_and_min_propagate_nan_on_the_gpu(dtype):
    """CUDA's fmaxf and __hmax return the other operand of a NaN; torch's (and the CPU
    backends') max and min return NaN."""
    x, y = nan_inputs(dtype, "cuda")
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(nan_min_max, backend=backend)(x, y)
    for g, e in zip(got, nan_min_max(x, y)):
        assert torch.equal(g.isnan(), e.isnan())
        assert torch.allclose(g, e, equal_nan=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_nan_propagating_max_and_min_compile_with_nvcc(tmp_path):
    from tensorforge.codegen.cuda_helpers import MINMAX_NAN_HELPERS
    from tests.graph.graph_fuzz_nvcc import one_translation_unit

    sources = []
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        inputs = list(nan_inputs(dtype))
        gm = make_fx(nan_min_max, decomposition_table=decompositions())(*inputs)
        compiled = compile_aten(gm, inputs, {}, Options(target="cuda -arch=sm_90"))
        assert isinstance(compiled, CompiledGraph) and not compiled.program.fallbacks
        sources += [s.module.get_source("cuda") for s in compiled.steps if hasattr(s, "module")]
    kernels = "\n".join(sources).replace(MINMAX_NAN_HELPERS.rstrip(), "")
    assert "tf_max_nan(" in kernels and "fmaxf(" not in kernels and "__hmax(" not in kernels
    text = one_translation_unit(sources)  # for sm_90 (max.NaN) and sm_75 (selects)
    (tmp_path / "nan.cu").write_text(text)
    arches = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in (90, 75)]
    command = ["nvcc", *arches, "-c", "-o", str(tmp_path / "nan.o"), str(tmp_path / "nan.cu")]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
