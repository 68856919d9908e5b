"""The fused attention kernels `scaled_dot_product_attention` dispatches to on a GPU, as the
math the CPU trace takes (torch decomposes `_scaled_dot_product_flash_attention_for_cpu` through
`_scaled_dot_product_attention_math` the same way): matmuls, a masked softmax, a matmul, which
the graph layer fuses. Without them a GPU graph ran each attention in eager torch, a fallback
per block (H200: ViT and BERT blocks 0.92x and 0.86x eager, LLaMA's 1.78x with its fallback).

Inference only, as the backend: no dropout (a decomposition that cannot apply returns
NotImplemented, and the op runs as it was), and the log-sum-exp and random-state outputs,
which only a backward pass reads, are empty.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _attention(query, key, value, mask, is_causal: bool, scale):
    out, _ = aten._scaled_dot_product_attention_math.default(
        query,
        key,
        value,
        attn_mask=mask,
        dropout_p=0.0,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=query.size(1) != key.size(1),
    )
    return out


def _unused(query):
    return query.new_empty((0,))


def efficient_attention(
    query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None
):
    if dropout_p != 0.0:
        return NotImplemented
    out = _attention(query, key, value, attn_bias, is_causal, scale)
    return out, _unused(query), _unused(query), _unused(query)


def flash_attention(
    query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    return cudnn_attention(
        query, key, value, None, False, dropout_p, is_causal, return_debug_mask, scale=scale
    )  # the same outputs, without a bias


def cudnn_attention(
    query,
    key,
    value,
    attn_bias,
    compute_log_sumexp,
    dropout_p=0.0,
    is_causal=False,
    return_debug_mask=False,
    *,
    scale=None,
):
    if dropout_p != 0.0 or return_debug_mask:
        return NotImplemented
    out = _attention(query, key, value, attn_bias, is_causal, scale)
    empty = _unused(query)
    return out, empty, empty, empty, query.size(2), key.size(2), empty, empty, empty


ATTENTION_DECOMPOSITIONS = {
    aten._scaled_dot_product_efficient_attention.default: efficient_attention,
    aten._scaled_dot_product_flash_attention.default: flash_attention,
    aten._scaled_dot_product_cudnn_attention.default: cudnn_attention,
}
