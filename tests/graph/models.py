"""Small models written in plain torch, for the backend's end-to-end tests and the tutorial."""

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=37, hidden=64, d_out=10):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class SmallCNN(nn.Module):
    """conv + BN + ReLU + pool, a strided depthwise conv, adaptive pool, linear."""

    def __init__(self, channels=8, classes=5):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, channels, 3, padding=1), nn.BatchNorm2d(channels)
        self.c2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1, groups=channels)
        self.b2 = nn.BatchNorm2d(channels)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.b1(self.c1(x))), 2)
        y = F.relu6(self.b2(self.c2(y)))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class Block(nn.Module):
    """A GPT-2 block: layer norm, causal self-attention (softmax), GELU MLP, residuals."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def randomize_batch_norms(model: nn.Module) -> nn.Module:
    """Running statistics that are not the identity, so folding them is tested."""
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) * 2 - 1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.bias.shape, generator=gen) - 0.5)
    return model
