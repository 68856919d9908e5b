"""bfloat16 batched products (attention's Q K^T and P V: both operands computed) on the CPU's
dot micro-kernel (graph/lower_cpu_dot.py, cpu_dot_bmm): the right matrices packed into VNNI
panels inside the kernel, each batch entry's product on `vdpbf16ps`; as accurate as eager's
bfloat16 run (against float32 on the same values: at most twice eager's error plus a quarter
of a unit in the last place) for odd sizes, head dims 64 and 80, causal masks."""

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from tests.graph import zoo_models as zoo  # noqa: E402
from tests.graph.test_lower_cpu_dot import (  # noqa: E402
    NO_DOT_TARGETS,
    check_bf16,
    dot_kernels,
    needs_dot,
    strict,  # noqa: F401 (a fixture)
)


class Attention(nn.Module):
    """qkv projection, causal attention over `heads` heads of `head` values written out in
    bfloat16 products (GPT-2's and BERT's code: Q K^T, scale, mask, softmax, P V), output
    projection."""

    def __init__(self, heads, head, causal=True):
        super().__init__()
        d = heads * head
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (C // self.heads) ** -0.5
        if self.causal:
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            att = att.masked_fill(~mask, float("-inf"))
        y = torch.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Products(nn.Module):
    """Batched products of two computed matrices: a @ b and a @ b^T (the transposed one read
    as attention reads K), each scaled, as an epilogue, and summed."""

    def forward(self, a, b, bt):
        return torch.bmm(a * 2, b) + 0.5, torch.matmul(a, (bt * 3).transpose(-1, -2))


@needs_dot
@pytest.mark.parametrize("head", [64, 80])
@pytest.mark.parametrize("seq", [1, 7, 129])
def test_causal_attention_products_on_the_dot_kernel(seq, head, capsys):
    torch.manual_seed(seq + head)
    report = check_bf16(Attention(2, head), torch.randn(2, seq, 2 * head), capsys)
    assert dot_kernels(report) == 4, report  # qkv, Q K^T, P V, proj


@needs_dot
@pytest.mark.parametrize("head", [64, 80])
def test_attention_of_a_run_time_sequence_compiles_once(head):
    """dynamic=True: one compile serves sequences of 7, 64, 65 and 129 tokens (and batches
    of 2 and 3) with all six products on the dot kernel: rows, attention's columns and P V's
    k known at run time (rows unpadded, k and columns zero-padded to whole tiles)."""
    import copy

    from tests.graph.models import Block
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once
    from tests.graph.test_half_precision import error

    torch.manual_seed(head)
    model = Block(2 * head, 2).eval().to(torch.bfloat16)
    fast, graphs = compiled_once(model)
    unit = torch.finfo(torch.bfloat16).eps / 2
    with torch.no_grad():
        for batch, seq in ((2, 9), (2, 7), (3, 64), (2, 65), (2, 129)):
            x = torch.randn(batch, seq, 2 * head).to(torch.bfloat16)
            reference = copy.deepcopy(model).float()(x.float()).double()
            ours, eagers = error(fast(x), reference), error(model(x), reference)
            assert ours <= 2 * eagers + unit / 4, f"{seq} tokens: {ours:.2e}, eager's {eagers:.2e}"
    assert len(graphs) == 1
    sources = [getattr(step, "source", "") for step in _find_compiled(graphs[0]).steps]
    assert sum("dot micro-kernel" in source for source in sources) == 6, sources


@needs_dot
def test_sdpa_of_a_llama_block_on_the_dot_kernel(capsys):
    """scaled_dot_product_attention (causal; rotary Q and K; head dim 80) decomposed as eager's
    CPU kernel computes bfloat16 (attention_decompositions.cpu_flash_attention): Q K^T a
    float32 product of bfloat16 values, P V of bfloat16 P: both on the dot kernel, with the
    seven linear layers."""
    torch.manual_seed(0)
    model = zoo.randomize_norms(zoo.LlamaBlock(160, 2, 344))
    report = check_bf16(model, torch.randn(1, 129, 160), capsys)
    assert dot_kernels(report) == 9, report


class MaskedSdpa(nn.Module):
    """SDPA with a boolean or an additive mask (BERT's padding), no causal mask."""

    def __init__(self, heads, head):
        super().__init__()
        self.attention = Attention(heads, head)
        self.heads = heads

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.attention.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.attention.proj(y.transpose(1, 2).reshape(B, T, C))


@needs_dot
@pytest.mark.parametrize("boolean", [True, False])
def test_masked_sdpa_on_the_dot_kernel(boolean, capsys):
    torch.manual_seed(1)
    keep = torch.rand(2, 1, 1, 37) > 0.3
    keep[..., 0] = True  # every row keeps a key
    mask = keep if boolean else torch.where(keep, 0.0, -1e4)
    report = check_bf16(MaskedSdpa(2, 64), (torch.randn(2, 37, 128), mask), capsys)
    assert dot_kernels(report) == 4, report


@needs_dot
@pytest.mark.parametrize("batch, n, k, m", [(3, 13, 37, 129), (1, 1, 2, 1), (5, 67, 130, 80)])
def test_batched_products_of_odd_sizes(batch, n, k, m, capsys):
    """Rows, k and columns off the tiles (zero-padded k and columns, row n - 1 repeated);
    one row, one column; an epilogue on each; b as it lies and transposed."""
    torch.manual_seed(n)
    a, b, bt = torch.randn(batch, n, k), torch.randn(batch, k, m), torch.randn(batch, m, k)
    report = check_bf16(Products(), (a, b, bt), capsys)
    assert dot_kernels(report) == 2, report


@pytest.mark.parametrize("target", NO_DOT_TARGETS)
def test_targets_without_the_instruction_keep_float32_attention(target, capsys):
    report = check_bf16(Attention(2, 16), torch.randn(1, 9, 32), capsys, target)
    assert dot_kernels(report) == 0, report
    llama = zoo.randomize_norms(zoo.LlamaBlock(32, 2, 40))  # SDPA, decomposed as eager's
    assert dot_kernels(check_bf16(llama, torch.randn(1, 13, 32), capsys, target)) == 0


def test_an_amx_target_builds_batched_products_with_amx_tiles():
    """Sapphire Rapids (AMX): its 16-row tiles for each batch entry; built, not run (this
    host may lack AMX and AVX512-FP16)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    a = torch.randn(3, 100, 64, dtype=torch.bfloat16)
    b = torch.randn(3, 64, 129, dtype=torch.bfloat16)
    gm = make_fx(torch.bmm, decomposition_table=decompositions())(a, b)
    options = Options(target="llvm -mcpu=sapphirerapids")
    (kernel,) = compile_aten(gm, [a, b], {}, options).program.steps
    tiles = kernel.anchor.info["cpu_dot"]
    assert tiles.amx and tiles.mr % 16 == 0 and tiles.kc % 32 == 0
    assert kernel.anchor.info["pack"] is not None  # b's panels packed in the kernel
