"""Half-precision models on a GPU: tensorforge against eager and Inductor (default mode), and
each one's error against the same model in float32 on the same half values.

    python benchmarks/torch_half_cuda.py [--dtypes float16,bfloat16] [--models resnet,gpt2]

Times are host times of 50 calls with a synchronize, best of 5 samples. `--models` keeps the
cases whose name contains any of the given words.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import torch

import tensorforge.graph.backend as tensorforge_backend

sys.path.insert(0, os.path.dirname(__file__))
from torch_models import ResNet18  # noqa: E402


class Block(torch.nn.Module):
    """A GPT-2-style encoder block (pre-LN, attention without a mask as two batched products
    and a softmax, GELU MLP)."""

    def __init__(self, c: int = 768, heads: int = 12):
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)
        self.fc1, self.fc2 = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
        self.ln1, self.ln2 = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, 2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-1, -2) * (C // self.heads) ** -0.5).softmax(-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768)
    )


def odd_mlp():
    return torch.nn.Sequential(torch.nn.Linear(96, 208), torch.nn.ReLU(), torch.nn.Linear(208, 48))


CASES = [
    ("resnet18 b1", ResNet18, (1, 3, 224, 224)),
    ("resnet18 b16", ResNet18, (16, 3, 224, 224)),
    ("odd mlp 100 rows", odd_mlp, (100, 96)),
    ("odd mlp 17 rows", odd_mlp, (17, 96)),
    ("mlp 64 rows", mlp, (64, 768)),
    ("mlp 2048 rows", mlp, (2048, 768)),
    ("gpt2 block 128 tokens", Block, (1, 128, 768)),
    ("gpt2 block 8 x 256 tokens", Block, (8, 256, 768)),
]


def best_ms(fn, x, calls: int = 50, samples: int = 5) -> float:
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def run(name, make, shape, dtype) -> None:
    torch._dynamo.reset()
    model = make().eval().cuda().to(dtype)
    reference = make().eval().cuda()
    reference.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    x = torch.randn(shape, device="cuda", dtype=dtype)
    with torch.no_grad():
        want = reference(x.float())
        scale = want.abs().max().item()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = torch.compile(model, backend=tensorforge_backend)
            got = compiled(x)
        fallbacks = sum("tensorforge" in str(w.message) for w in caught)
        inductor = torch.compile(model)
        errors = [(y.float() - want).abs().max().item() / scale for y in (got, model(x))]
        eager_ms, ind_ms, tf_ms = (best_ms(f, x) for f in (model, inductor, compiled))
    print(
        f"{str(dtype)[6:]:9s} {name:26s} eager {eager_ms:7.3f} inductor {ind_ms:7.3f} "
        f"tf {tf_ms:7.3f} ms  tf/eager {eager_ms / tf_ms:5.2f} tf/inductor {ind_ms / tf_ms:5.2f}"
        f"  err tf {errors[0]:.1e} eager {errors[1]:.1e}  fallback warnings {fallbacks}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--models", default="", help="words: keep cases whose name has one")
    args = parser.parse_args()
    words = [w for w in args.models.split(",") if w]
    for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
        for name, make, shape in CASES:
            if not words or any(w in name for w in words):
                run(name, make, shape, dtype)


if __name__ == "__main__":
    main()
