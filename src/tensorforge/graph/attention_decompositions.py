"""The fused attention kernels `scaled_dot_product_attention` dispatches to on a GPU, as the
math the CPU trace takes (torch decomposes `_scaled_dot_product_flash_attention_for_cpu` through
`_scaled_dot_product_attention_math` the same way): matmuls, a masked softmax, a matmul, which
the graph layer fuses. Without them a GPU graph ran each attention in eager torch, a fallback
per block (H200: ViT and BERT blocks 0.92x and 0.86x eager, LLaMA's 1.78x with its fallback).
The CPU's own kernel in bfloat16 is decomposed as it computes (`cpu_flash_attention`: bfloat16
operands for both products, so both take the dot micro-kernel where the target has one).

Inference only, as the backend: no dropout (a decomposition that cannot apply returns
NotImplemented, and the op runs as it was), and the log-sum-exp and random-state outputs,
which only a backward pass reads, are empty.
"""

from __future__ import annotations

import math

import torch

from tensorforge.ops.matmul import round_up

aten = torch.ops.aten


def _attention(query, key, value, mask, is_causal: bool, scale):
    if query.dtype in (torch.float16, torch.bfloat16) and _static(query, key, value):
        return _half_attention(query, key, value, mask, is_causal, scale)
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


def _static(*tensors) -> bool:
    return all(isinstance(d, int) for t in tensors for d in t.shape)


# the lengths the GPU's tensor-core products take whole (graph/lower_tensor_core.py): a
# computed right matrix in 64-column tiles, the sum in 16-term steps
TILE_COLUMNS, SUM_STEP = 64, 16


def _padded(x, pads):
    """x padded with zeros (F.pad's `pads`), or x itself where they are all 0 (a product then
    reads its operand in place)."""
    return torch.nn.functional.pad(x, pads) if any(pads) else x


def _half_attention(query, key, value, mask, is_causal: bool, scale):
    """A GPU's fused attention in half precision, as those kernels compute it (not torch's
    math decomposition, which casts Q and K to float32 and scales both before the product: a
    float32 product the GPU can only run on CUDA cores): Q K^T of the half values summed in
    float32 (exact products: lower_linalg puts the casts' product on tensor cores), scaled and
    masked in float32, softmax in float32, P rounded to the half dtype for P V (half operands,
    float32 sums, one rounding). K and V are padded with zero rows to whole 64-column tiles
    (their padded scores masked out), and the head size to whole 16-term steps, so that both
    products take tensor cores at any sequence length (ViT's 197 tokens: 8x slower on CUDA
    cores, 4x the whole model's eager time). Padded here rather than by the products' own
    padded copies (lower_tensor_core.padded_operands): the softmax then writes P at the padded
    width, whole rows wgmma reads in place (H200, ViT-B/16 fp16 batch 8: 1.80 ms against 2.09
    with the copies)."""
    N, H, L, E = query.shape
    S = key.size(2)
    if key.size(1) != H:  # grouped-query attention: each K / V head serves H / H_kv heads
        key = key.repeat_interleave(H // key.size(1), dim=1)
        value = value.repeat_interleave(H // value.size(1), dim=1)
    Sp, Ep, Ev = round_up(S, TILE_COLUMNS), round_up(E, SUM_STEP), value.size(-1)
    Vp = round_up(Ev, TILE_COLUMNS)  # (the columns of P V)
    q = _padded(query.reshape(N * H, L, E), (0, Ep - E))
    k = _padded(key.reshape(N * H, S, E), (0, Ep - E, 0, Sp - S))
    v = _padded(value.reshape(N * H, S, Ev), (0, Vp - Ev, 0, Sp - S))
    scores = torch.bmm(q.float(), k.transpose(1, 2).float()).view(N, H, L, Sp)
    scores = scores * (1.0 / math.sqrt(E) if scale is None else scale)
    columns = torch.arange(Sp, device=query.device)
    hidden = columns >= S if Sp != S else None  # (the padding's columns)
    if is_causal:
        later = columns > torch.arange(L, device=query.device)[:, None]
        hidden = later if hidden is None else hidden | later
    if mask is not None and mask.size(-1) == S:
        mask = _padded(mask, (0, Sp - S))  # (False or 0: hidden already)
    if mask is not None and mask.dtype == torch.bool:
        hidden = ~mask if hidden is None else hidden | ~mask
    elif mask is not None:
        scores = scores + mask.float()
    if hidden is not None:
        scores = scores.masked_fill(hidden, float("-inf"))
    p = aten._safe_softmax(scores, -1).to(query.dtype)
    out = torch.bmm(p.view(N * H, L, Sp), v)
    return out[:, :, :Ev].reshape(N, H, L, Ev)


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


def cpu_flash_attention(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    """The CPU's attention. bfloat16 as eager's CPU kernel computes it (not torch's float32 math
    decomposition): Q K^T of the bfloat16 values summed in float32 (a float32 product of bfloat16
    values cast up: lower_linalg puts it on the dot kernel where the target has one), scaled and
    masked in float32, softmax in float32, P rounded to bfloat16 for P V (bfloat16 operands,
    float32 sums, one rounding). Other dtypes: torch's decomposition (the float32 math)."""
    from torch._decomp.decompositions import scaled_dot_product_flash_attention_for_cpu

    if query.dtype != torch.bfloat16 or dropout_p != 0.0:
        return scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )
    N, H, L, E = query.shape
    S = key.size(2)
    if key.size(1) != H:  # grouped-query attention: each K / V head serves H / H_kv heads
        key = key.repeat_interleave(H // key.size(1), dim=1)
        value = value.repeat_interleave(H // value.size(1), dim=1)
    q = query.reshape(N * H, L, E)
    kt = key.reshape(N * H, S, E).transpose(1, 2)
    scores = torch.bmm(q.float(), kt.float()).view(N, H, L, S)  # the casts feed the product
    scores = scores * (1.0 / math.sqrt(E) if scale is None else scale)
    if is_causal:
        causal = torch.ones(L, S, dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.float()
    p = aten._safe_softmax(scores, -1).to(torch.bfloat16)
    out = torch.bmm(p.reshape(N * H, L, S), value.reshape(N * H, S, E)).view(N, H, L, E)
    # the layout of eager's output: [L, N, H, E] in memory, seen as [N, H, L, E]
    return out.permute(2, 0, 1, 3).contiguous().permute(1, 2, 0, 3), _unused(query)


ATTENTION_DECOMPOSITIONS = {
    aten._scaled_dot_product_efficient_attention.default: efficient_attention,
    aten._scaled_dot_product_flash_attention.default: flash_attention,
    aten._scaled_dot_product_cudnn_attention.default: cudnn_attention,
    aten._scaled_dot_product_flash_attention_for_cpu.default: cpu_flash_attention,
}
