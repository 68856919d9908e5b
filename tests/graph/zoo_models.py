"""Common model blocks written in plain torch (no torchvision/transformers), for the backend's
zoo tests (test_zoo.py) and benchmarks/torch_zoo.py."""

import torch
import torch.nn.functional as F
from torch import nn


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3 (stride 1 or 2), 1x1 project, BN after
    each, ReLU6 or hardswish, residual where the shape allows."""

    def __init__(self, c_in=16, c_out=16, stride=1, expand=4, act="relu6"):
        super().__init__()
        hidden = c_in * expand
        self.act = {"relu6": nn.ReLU6(), "hardswish": nn.Hardswish()}[act]
        self.expand = nn.Sequential(nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden))
        self.dw = nn.Sequential(
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
        )
        self.project = nn.Sequential(nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        y = self.project(self.act(self.dw(self.act(self.expand(x)))))
        return x + y if self.residual else y


class MobileNetV2Blocks(nn.Module):
    """Two inverted residuals (stride 1 with ReLU6, stride 2 with hardswish) and hardsigmoid."""

    def __init__(self, c=16):
        super().__init__()
        self.b1 = InvertedResidual(c, c, 1, act="relu6")
        self.b2 = InvertedResidual(c, 2 * c, 2, act="hardswish")

    def forward(self, x):
        y = self.b2(self.b1(x))
        return y * F.hardsigmoid(y.mean((2, 3), keepdim=True))  # a squeeze-excite-like gate


class EncoderBlock(nn.Module):
    """A ViT/BERT encoder block: pre-norm, SDPA (with an optional additive or boolean mask),
    GELU MLP (exact or tanh)."""

    def __init__(self, d=64, heads=4, approximate="none"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.approximate = heads, approximate

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.approximate))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.rand(d) + 0.5), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary embeddings (cos/sin tables from positions, halves sliced and
    concatenated), causal SDPA, SiLU-gated MLP."""

    def __init__(self, d=64, heads=4, hidden=172):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.wq, self.wk = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.wv, self.wo = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.heads = heads
        head = d // heads
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, head, 2) / head))

    def forward(self, x):
        B, T, C = x.shape
        h = self.norm1(x)
        q, k, v = (
            w(h).view(B, T, self.heads, C // self.heads).transpose(1, 2)
            for w in (self.wq, self.wk, self.wv)
        )
        t = torch.arange(T, device=x.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)  # (as Hugging Face's LLaMA)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class UNetBlock(nn.Module):
    """GroupNorm + SiLU + conv, a nearest 2x upsample, a skip concatenated on channels, and a
    transposed convolution back down the channels (and up in space)."""

    def __init__(self, c=16, groups=4):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, 2 * c)
        self.conv2 = nn.Conv2d(2 * c, c, 3, padding=1)
        self.up = nn.ConvTranspose2d(c, c // 2, 2, stride=2)

    def forward(self, x, skip):
        h = self.conv1(F.silu(self.norm1(x)))
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        h = torch.cat((h, skip), dim=1)
        h = self.conv2(F.silu(self.norm2(h)))
        return self.up(h)


class EmbeddingClassifier(nn.Module):
    """Token + learned positional embedding (positions from torch.arange), LayerNorm, mean pool
    over the sequence, linear head."""

    def __init__(self, vocab=101, d=32, max_len=256, classes=7):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, classes)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        h = self.norm(self.tok(ids) + self.pos(positions))
        return self.head(h.mean(dim=1))


class RecurrentClassifier(nn.Module):
    """An LSTM or GRU over the sequence (eager inside the graph), a linear head on the last step."""

    def __init__(self, d=16, hidden=24, kind="lstm", classes=5):
        super().__init__()
        self.rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(d, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(torch.relu(out[:, -1]))


def randomize_norms(model: nn.Module) -> nn.Module:
    """Running statistics and affine parameters that are not the identity, so folding and the
    scale/shift are tested."""
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) * 2 - 1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) - 0.5)
    return model
