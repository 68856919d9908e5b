"""Tutorial 9: a PyTorch model through `torch.compile(model, backend="tensorforge")`.

Dynamo captures the model's graph, aot_autograd lowers it to ATen, and tensorforge's graph layer
turns each ATen operator into tensor expressions, fuses them into kernels (element-wise chains
into one loop, bias + activation + residual into the matmul that feeds them, softmax and layer
norm each into one row kernel), schedules each kernel and runs them from one callable. An
operator tensorforge has no lowering for runs in eager torch inside that callable.

Run: python tutorials/09_torch_compile.py [--small]   (section 5: the block in bfloat16)
"""

import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

SMALL = "--small" in sys.argv
d, heads, seq = (64, 4, 16) if SMALL else (768, 12, 128)


class Block(nn.Module):
    """A GPT-2 block, in plain torch."""

    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // heads) ** 0.5)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


torch.manual_seed(0)
model = Block().eval()
x = torch.randn(1, seq, d)

# 1. Compile. The backend is found by name through the `torch_dynamo_backends` entry point that
#    `pip install -e .` registers; `tensorforge.graph.backend` is the same function, usable where
#    the package is not installed (run from a source tree). `report` prints the kernels after
#    the first call; `check` compares each kernel's output with eager torch.
from tensorforge.graph import backend  # noqa: E402

with torch.no_grad():
    fast = torch.compile(model, backend=backend, options={"report": True, "check": True})
    start = time.perf_counter()
    y = fast(x)  # compiles, then runs (the report goes to stderr)
    print(f"first call (compile + run): {time.perf_counter() - start:.1f} s")
    expected = model(x)
    error = ((y - expected).abs().max() / expected.abs().max()).item()
    print(f"relative error against eager: {error:.1e}")
    assert error < 1e-4

# 2. What fused. Each row of the report above is one kernel: "matmul: ... addmm, gelu" is the
#    first MLP layer with its GELU computed on each register tile as it is stored; the attention
#    scores' scale and causal mask ride on the q @ k^T kernel; "row operator" is softmax or layer
#    norm, one row per task. "computed at compile time" lists the weight transposes: weights are
#    constants, packed once into the layout the matmul schedule reads.

# 3. A new batch size without recompiling: mark the batch dimension dynamic and the kernels take
#    it as an argument (a te.var), so the same compiled code serves every batch.
with torch.no_grad():
    torch._dynamo.reset()
    fast = torch.compile(model, backend=backend)
    for batch in (2, 3):
        xb = torch.randn(batch, seq, d)
        torch._dynamo.mark_dynamic(xb, 0)
        got, expected = fast(xb), model(xb)
        print(
            f"batch {batch}: relative error {((got - expected).abs().max() / expected.abs().max()).item():.1e}"
        )

# 4. Time it against eager.
with torch.no_grad():
    for name, fn in (("eager", model), ("tensorforge", fast)):
        fn(xb)
        start = time.perf_counter()
        for _ in range(5):
            fn(xb)
        print(f"{name:12} {(time.perf_counter() - start) / 5 * 1e3:8.2f} ms")

# 5. Half precision. The same block in bfloat16 (or float16) compiles the same way: buffers keep
#    the model's dtype, kernels compute in float32 and round once where they store, as Inductor
#    does (eager rounds after every operator, so the two differ by a few bfloat16 roundings, not
#    by accumulation). On a CPU with AVX512-BF16 the linear layers run on `vdpbf16ps`; on an
#    sm_80+ GPU half products and convolutions run on tensor cores. Both stay as close to the
#    float32 model as eager is. (A float32 model on such a GPU takes the tensor cores in TF32
#    where torch's flags say eager would: large convolutions (2^28+ multiply-adds) by default,
#    matrix products after torch.set_float32_matmul_precision("high"); docs/torch-compile.md.)
with torch.no_grad():
    torch._dynamo.reset()
    half_model = Block().eval()
    half_model.load_state_dict(model.state_dict())
    half_model = half_model.to(torch.bfloat16)
    xh = x.to(torch.bfloat16)
    reference = model(xh.float())  # the float32 model on the same bfloat16 values
    fast_half = torch.compile(half_model, backend=backend)
    ours, eagers = fast_half(xh), half_model(xh)
    scale = reference.abs().max()
    ours_error = ((ours.float() - reference).abs().max() / scale).item()
    eager_error = ((eagers.float() - reference).abs().max() / scale).item()
    print(f"bfloat16 against float32: tensorforge {ours_error:.1e}, eager {eager_error:.1e}")
    assert ours.dtype == torch.bfloat16 and ours_error <= 2 * eager_error + 1e-3
