"""wgmma products whose operand tiles bulk tensor copies fill (graph/lower_tensor_core.py's
plain_source and with_tma_fills, schedules_tensor_core.py's copies_a_buffer): a left matrix
that is a buffer read as it is (an input, an earlier kernel's result), a constant right matrix,
a convolution's weights and columns; one read through a view keeps every thread's cp.async.

Here (no GPU): which tiles take which fill, and that the kernels compile to sm_90a. On an H100:
rows past the tiles (zero-filled by the copies), fewer than 64 rows and bfloat16, against eager."""

import re
import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import lower_tensor_core, lower_ws_product  # noqa: E402
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tensorforge.graph.schedules_tensor_core import WGMMA_SOURCE  # noqa: E402
from tests.graph.test_dynamic_and_cuda import TORCH_CUDA  # noqa: E402
from tests.graph.test_schedules_cuda import assert_compiles_with_nvcc, compiled_for, joined_sources  # noqa: E402
from tests.graph.test_tensor_core import assert_as_close_to_fp32_as_eager  # noqa: E402
from tests.graph.test_wgmma_graph import shared_memory  # noqa: E402


def tma_products(dtype=torch.float16):
    """An MLP of 1000 rows (a tail past the 64-row tiles; its second product reads the first's
    GELU, a buffer), a linear layer of 40 rows (mma.sync), one over a view that skips each
    sequence's first token (its left matrix read through the view: cp.async), and a 3 x 3
    convolution at batch 8 (weights and im2col columns)."""

    def fn(x, w1, b1, w2, seq, w3, img, cw):
        h = F.gelu(F.linear(x, w1, b1))  # 1000 x 1536 from 768
        y = F.linear(h, w2)  # 1000 x 768 from 1536
        few = F.linear(x[:40], w3)
        skipped = F.linear(seq[:, 1:], w3)  # 8 x 256 rows read past each first token
        return y, few, skipped, F.relu(F.conv2d(img, cw, padding=1))

    gen = torch.Generator().manual_seed(1)
    shapes = [(1000, 768), (1536, 768), (1536,), (768, 1536), (8, 257, 768), (768, 768),
              (8, 64, 48, 48), (64, 64, 3, 3)]  # fmt: skip
    inputs = [torch.randn(*s, generator=gen) / 4 for s in shapes]
    return fn, [t.to(dtype) for t in inputs], (1, 2, 3, 5, 7)


def fills(kernel) -> tuple[int, int]:
    """The bulk tensor copies and the cp.async fills of a kernel's source."""
    text = kernel.module.get_source("cuda")
    return len(re.findall(r"tf_tma_sw128<\d+", text)), len(re.findall(r"tf_cp_async_sw128<\d+", text))  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_plain_operands_take_bulk_tensor_copies_views_cp_async(tmp_path, monkeypatch):
    monkeypatch.setattr(lower_ws_product, "WS_PRODUCTS", False)  # (the scheduled kernel's
    # tiles: these products take the hand-written one, graph/lower_ws_product.py)
    monkeypatch.setattr(lower_tensor_core, "TMA_FILLS", True)
    _, _, compiled = compiled_for("cuda -arch=sm_90", graph=tma_products)
    wgmma = [s for s in compiled.steps if isinstance(s, BuiltKernel) and s.source == WGMMA_SOURCE]
    counts = [fills(s) for s in wgmma]
    stages = [s.spec.anchor.info["tensor_core"].stages for s in wgmma]
    # fc1, fc2, the conv: both tiles by bulk copies in each stage of the prologue and the loop;
    # the view's product: its left tile by cp.async, the constant right one by bulk copies
    assert counts == [(2 * t, 0) if k != 2 else (t, t) for k, t in enumerate(stages)]
    assert all(s.spec.anchor.info["tensor_core"].fill == "tma" for s in wgmma)
    # the float32 tile takes the pipeline's bytes once the copies have landed (cuda_shared.py)
    assert all(shared_memory(s) == s.spec.anchor.info["tensor_core"].shared_bytes() for s in wgmma)  # fmt: skip
    assert_compiles_with_nvcc(tmp_path, joined_sources({id(s.module): s.module for s in wgmma}.values()), "sm_90a")  # fmt: skip


@pytest.mark.cuda
@TORCH_CUDA
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("tma", [True, False])
def test_bulk_copied_products_on_the_gpu_are_as_close_to_fp32_as_eager(dtype, tma, monkeypatch):
    monkeypatch.setattr(lower_tensor_core, "TMA_FILLS", tma)  # (either way: both paths)
    assert_as_close_to_fp32_as_eager(lambda: tma_products(dtype))
