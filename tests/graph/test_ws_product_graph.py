"""Half products on the hand-written warp-specialized wgmma kernel (graph/lower_ws_product.py):
which products take it (sm_90, long reductions over a few waves of 128 x 128 tiles, a left
buffer (copied where it is a view) and constant weights), which following nodes its epilogue
computes (bias, GELU, residual), that its kernel compiles for sm_90a, and on the GPU that
products with tails in every dimension (rows, columns, k) are as close to fp32 as eager."""

import shutil
import subprocess

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import tensorforge.graph.lower_ws_product as WS  # noqa: E402
from tensorforge.graph.lower_ws_product import SOURCE  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import compiled_for, joined_sources  # noqa: E402
from tests.graph.test_tensor_core import assert_as_close_to_fp32_as_eager  # noqa: E402


def long_products(dtype=torch.float16):
    """1100 x 1000 from k 2064 (72 tiles of 128 x 128, 33 k steps of 64, a tail in each): with bias
    and a residual (the left matrix a graph input), and over a ReLU (an earlier kernel's
    result); then a short one (k 512) that stays on the scheduled kernel."""

    def fn(x, w, b, r, w2):
        y = F.linear(x, w, b) + r
        z = F.linear(torch.relu(x), w)
        return y, z, F.linear(y, w2)

    gen = torch.Generator().manual_seed(3)
    shapes = [(1100, 2064), (1000, 2064), (1000,), (1100, 1000), (512, 1000)]
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 2, 4)


def kernel_sources(target):
    _, _, compiled = compiled_for(target, graph=long_products)
    return [s for s in compiled.steps if isinstance(s, BuiltKernel)]


def test_long_products_take_the_hand_kernel_on_sm90_only(tmp_path):
    sm90 = kernel_sources("cuda -arch=sm_90")
    assert [s.source for s in sm90].count(SOURCE) == 2  # (the short product: scheduled)
    if not torch.cuda.is_available():  # (on a GPU machine sm_80 kernels are loaded, and fail
        # to load on an sm_90 device: the graph then runs eagerly)
        assert SOURCE not in {s.source for s in kernel_sources("cuda -arch=sm_80")}
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    hand = [s.module for s in sm90 if s.source == SOURCE][:1]
    # (-gencode: the form that assembles wgmma / setmaxnreg with every nvcc, HOPPER.md; the
    # -arch=sm_90a shorthand failed this test on the H200 machine's nvcc, which builds the
    # kernel itself)
    (tmp_path / "k.cu").write_text(joined_sources(hand))
    command = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_long_products_on_the_gpu_are_as_close_to_fp32_as_eager(dtype):
    assert_as_close_to_fp32_as_eager(lambda: long_products(dtype))


def fused_epilogues(dtype=torch.float16):
    """A transformer block's products, 1100 rows (4 x 275) of 912 (a k tail of 16) and 1000 (8):
    LayerNorm's [4, 275, 912] read as rows by fc1 (+ bias, GELU) and fc2 (+ bias, + the
    block's input); then the result transposed ([275, 4] rows: a copy) times a matrix + a bias
    row, GELU (an mm, as attention's input projection), and times another + a residual."""

    def fn(x, r, w1, b1, w2, b2, wq, bq, wr):
        y = F.gelu(F.linear(F.layer_norm(x, (912,)), w1, b1))
        z = x + F.linear(y, w2, b2)
        zt = z.transpose(0, 1).reshape(1100, 912)
        return z, F.gelu(torch.mm(zt, wq) + bq), torch.mm(zt, wr) + r

    gen = torch.Generator().manual_seed(5)
    shapes = [(4, 275, 912), (1100, 1000), (1000, 912), (1000,), (912, 1000), (912,), (912, 1000), (1000,), (912, 1000)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) / 8 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], tuple(range(2, 9))


def test_epilogues_fuse_into_the_hand_kernel(tmp_path, monkeypatch):
    monkeypatch.setattr(WS, "FUSE_RESIDUAL", True)  # (off by default: measured slower)
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=fused_epilogues)
    program = compiled.program
    ws = [s for s in program.steps if s.anchor is not None and s.anchor.kind == "ws_gemm"]
    assert [s.anchor.info["epilogue"] for s in ws] == ["bias_gelu", "bias_residual", "bias_gelu", "residual"]  # fmt: skip
    # LayerNorm, the 4 products and the transposed copy: no kernel of its own for an epilogue
    assert len(program.steps) == 6, [s.name for s in program.steps]
    assert not program.fallbacks
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")
    built = 0
    for step in compiled.steps:  # (the mm's: a bias row added after, a residual alone)
        if isinstance(step, BuiltKernel) and step.spec.name in (ws[2].name, ws[3].name):
            (tmp_path / "k.cu").write_text(joined_sources([step.module]))
            command = ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            assert result.returncode == 0, result.stderr[-3000:]
            built += 1
    assert built == 2


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("fuse_residual", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_epilogues_on_the_gpu_are_as_close_to_fp32_as_eager(dtype, fuse_residual, monkeypatch):  # fmt: skip
    monkeypatch.setattr(WS, "FUSE_RESIDUAL", fuse_residual)
    assert_as_close_to_fp32_as_eager(lambda: fused_epilogues(dtype))
