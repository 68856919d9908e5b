"""The GPU's fused attention kernels (efficient, flash, cuDNN), decomposed as the CPU's SDPA is:
against torch's own attention on this CPU, and compiled whole (no fallback) by the graph layer;
in half precision as those kernels compute it, both products on tensor cores for a GPU target."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from tensorforge.graph import Options, backend, compile_aten, decompositions  # noqa: E402
from tensorforge.graph.attention_decompositions import (  # noqa: E402
    ATTENTION_DECOMPOSITIONS,
    cudnn_attention,
    efficient_attention,
    flash_attention,
)
from tensorforge.graph.program import BuiltKernel  # noqa: E402
from tests.graph.test_lowering import check, rand, strict  # noqa: E402, F401 (strict: autouse)

aten = torch.ops.aten


def _qkv(heads=3, rows=7, cols=5, dim=8):
    return (
        rand(2, heads, rows, dim, seed=60),
        rand(2, heads, cols, dim, seed=61),
        rand(2, heads, cols, dim, seed=62),
    )


@pytest.mark.parametrize("causal", [False, True])
def test_each_decomposition_is_torchs_attention(causal):
    q, k, v = _qkv(cols=7)
    bias = rand(2, 3, 7, 7, seed=63)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3)
    with_bias = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
    got = [
        efficient_attention(q, k, v, None, False, is_causal=causal, scale=0.3)[0],
        flash_attention(q, k, v, is_causal=causal, scale=0.3)[0],
        cudnn_attention(q, k, v, None, False, is_causal=causal, scale=0.3)[0],
    ]
    for out in got:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        efficient_attention(q, k, v, bias, False, scale=0.3)[0], with_bias, rtol=1e-5, atol=1e-6
    )
    flash = flash_attention(q, k, v)
    assert len(flash) == 9 and flash[4:6] == (7, 7)  # max_q, max_k


def test_dropout_is_left_to_the_kernel():
    q, k, v = _qkv()
    assert efficient_attention(q, k, v, None, False, dropout_p=0.1) is NotImplemented
    assert flash_attention(q, k, v, dropout_p=0.1) is NotImplemented
    assert flash_attention(q, k, v, return_debug_mask=True) is NotImplemented


def test_the_backend_decomposes_them():
    table = decompositions()
    for op, fn in ATTENTION_DECOMPOSITIONS.items():
        assert table[op] is fn


def test_a_traced_efficient_attention_compiles_whole():
    """Traced through the backend's decompositions (as on a GPU), the kernel becomes matmuls and
    a softmax this CPU compiles with no fallback; with a mask, a scale, 7 queries on 5 keys."""
    q, k, v = _qkv()
    bias = rand(2, 3, 7, 5, seed=64)

    def fn(q, k, v, bias):
        return aten._scaled_dot_product_efficient_attention(q, k, v, bias, False, scale=0.25)[0]

    compiled = check(_Reference(fn), q, k, v, bias)  # no fallback, equal to torch's
    kinds = {
        s.spec.anchor.kind for s in compiled.steps if getattr(s, "spec", None) and s.spec.anchor
    }
    assert {"matmul", "softmax"} <= kinds


class _Reference:
    """`fn` traced, torch's own attention as the expected value (this CPU has no kernel for
    the GPU's op)."""

    def __init__(self, fn):
        self.fn = fn
        self.tracing = True

    def __call__(self, q, k, v, bias):
        if self.tracing:
            self.tracing = False
            return self.fn(q, k, v, bias)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.25)


HALF_CASES = {  # heads, K/V heads, queries, keys, head size, V's head size, causal, mask
    "keys_padded_to_64": (3, 3, 17, 13, 64, 64, False, None),
    "gqa_causal_odd_sizes": (4, 2, 21, 70, 20, 24, True, None),
    "bool_mask": (2, 2, 9, 11, 16, 16, False, "bool"),
    "float_mask_no_padding": (2, 2, 9, 64, 16, 16, False, "float"),
}


def _half_case(name, dtype):
    heads, kv_heads, rows, cols, dim, v_dim, causal, mask = HALF_CASES[name]
    q = rand(2, heads, rows, dim, seed=70).to(dtype)
    k = rand(2, kv_heads, cols, dim, seed=71).to(dtype)
    v = rand(2, kv_heads, cols, v_dim, seed=72).to(dtype)
    if mask == "bool":
        mask = rand(2, 1, rows, cols, seed=73) > -0.5
    elif mask == "float":
        mask = rand(rows, cols, seed=73).to(dtype)
    return q, k, v, mask, causal


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(HALF_CASES))
def test_half_attention_computes_as_the_fused_kernels(name, dtype):
    """Float32 sums of the half values, P rounded once: within two of the dtype's eps of
    float32 attention on the same values (padded keys, head sizes and masks change nothing)."""
    q, k, v, mask, causal = _half_case(name, dtype)
    got = efficient_attention(q, k, v, mask, False, is_causal=causal)[0]
    repeat = q.size(1) // k.size(1)
    expected = F.scaled_dot_product_attention(
        q.float(),
        k.float().repeat_interleave(repeat, 1),
        v.float().repeat_interleave(repeat, 1),
        attn_mask=mask if mask is None or mask.dtype == torch.bool else mask.float(),
        is_causal=causal,
    )
    assert got.dtype == dtype and got.shape == expected.shape
    error = ((got.float() - expected).abs().max() / expected.abs().max()).item()
    assert error <= 2 * torch.finfo(dtype).eps


@pytest.mark.parametrize("name", ["keys_padded_to_64", "gqa_causal_odd_sizes"])
def test_half_attention_takes_tensor_cores_on_a_gpu_target(name, tmp_path):
    """Built for sm_90 here: Q K^T (of the half values, float32 sums) and P V are tensor-core
    products at any sequence length and head size, and nvcc accepts the kernels."""
    q, k, v, mask, causal = _half_case(name, torch.float16)

    def fn(q, k, v):
        return flash_attention(q, k, v, is_causal=causal)[0]

    gm = make_fx(fn, decomposition_table=decompositions())(q, k, v)
    compiled = compile_aten(gm, [q, k, v], {}, Options(target="cuda -arch=sm_90"))
    assert compiled.program.fallbacks == []
    kernels = [s for s in compiled.steps if isinstance(s, BuiltKernel)]
    on_tensor_cores = {n for k in kernels if "tensor cores" in k.source for n in k.spec.nodes}
    assert {"bmm", "bmm_1"} <= on_tensor_cores  # (a product split along k: its sum besides)
    if shutil.which("nvcc"):
        from tests.graph.test_schedules_cuda import assert_compiles_with_nvcc, joined_sources

        text = joined_sources({id(k.module): k.module for k in kernels}.values())
        assert_compiles_with_nvcc(tmp_path, text)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_attention_matches_eager_on_the_gpu(dtype):
    """ViT's 197 tokens, a padding mask, causal GQA: against eager's fused kernels, both
    measured against float32 attention on the same values."""
    if not torch.cuda.is_available():
        pytest.skip("needs torch with CUDA")
    torch._dynamo.reset()
    for heads, kv_heads, rows, causal, masked in [(12, 12, 197, False, False), (8, 2, 77, True, False), (4, 4, 130, False, True)]:  # fmt: skip
        q = rand(2, heads, rows, 64, seed=80).to(dtype).cuda()
        k = rand(2, kv_heads, rows, 64, seed=81).to(dtype).cuda()
        v = rand(2, kv_heads, rows, 64, seed=82).to(dtype).cuda()
        mask = (rand(2, 1, 1, rows, seed=83) > -1.0).cuda() if masked else None
        gqa = kv_heads != heads

        def fn(q, k, v, mask=mask, causal=causal, gqa=gqa):
            return F.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, enable_gqa=gqa)

        got = torch.compile(fn, backend=backend, dynamic=False)(q, k, v)
        eager = fn(q, k, v)
        repeat = heads // kv_heads
        reference = fn(q.float(), k.float().repeat_interleave(repeat, 1), v.float().repeat_interleave(repeat, 1), gqa=False)  # fmt: skip
        ours = ((got.float() - reference).abs().max() / reference.abs().max()).item()
        eagers = ((eager.float() - reference).abs().max() / reference.abs().max()).item()
        assert got.dtype == dtype and ours <= 2 * eagers + torch.finfo(dtype).eps
