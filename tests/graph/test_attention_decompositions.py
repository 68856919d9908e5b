"""The GPU's fused attention kernels (efficient, flash, cuDNN), decomposed as the CPU's SDPA is:
against torch's own attention on this CPU, and compiled whole (no fallback) by the graph layer."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import decompositions  # noqa: E402
from tensorforge.graph.attention_decompositions import (  # noqa: E402
    ATTENTION_DECOMPOSITIONS,
    cudnn_attention,
    efficient_attention,
    flash_attention,
)
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
