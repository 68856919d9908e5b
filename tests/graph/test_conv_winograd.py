"""Winograd 3 x 3 convolutions (graph/lower_conv_winograd.py): the transforms exact in float64,
the lowering against float64 eager within F(m)'s tolerance on awkward shapes, the epilogue
fused, and the rule that picks F(4), F(2) or the direct paths."""

import types

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

import tensorforge as tf  # noqa: E402
from tensorforge.graph import lower_conv  # noqa: E402
from tensorforge.graph.lower_conv_winograd import (  # noqa: E402
    TRANSFORMS,
    winograd_tile,
    winograd_weights,
)
from tests.graph.test_lowering import compile_fn, rand, strict  # noqa: E402, F401 (autouse)

# error relative to the output's largest magnitude, against float64 eager: F(4 x 4)'s
# transforms scale values by up to 8 x 5 and 1/24, so it loses ~5 bits against the direct sum.
# Measured (ReLU'd inputs, He-scaled weights): F(4) 4.9e-6 (64 @ 56), 9.0e-6 (256 @ 14), 1.1e-5
# (512 @ 7), 1.7e-5 (1024 @ 5); F(2) 2.7e-7 to 9.6e-7; float32 eager 2-3e-7
TOLERANCE = {4: 1e-4, 2: 2e-5}


@pytest.mark.parametrize("m", [4, 2])
def test_transforms_are_exact_in_float64(m):
    """A^T [(G g G^T) * (B^T d B)] A equals the 3 x 3 correlation of each (m + 2)^2 tile d."""
    bt, _, at = (torch.tensor([[float(v) for v in row] for row in t], dtype=torch.float64)
                 for t in TRANSFORMS[m])  # fmt: skip
    g = torch.randn(5, 3, 3, 3, dtype=torch.float64)
    d = torch.randn(1, 3, m + 2, m + 2, dtype=torch.float64)
    u = winograd_weights(g, m).reshape(m + 2, m + 2, 5, 3)
    v = torch.einsum("ar,crs,bs->abc", bt, d[0], bt)
    y = torch.einsum("ia,abfc,abc,jb->fij", at, u, v, at)
    assert torch.allclose(y, F.conv2d(d, g)[0], atol=1e-12)


def _forced(monkeypatch, m):
    monkeypatch.setattr(lower_conv, "winograd_tile", lambda *args: m)


@pytest.mark.parametrize("m", [4, 2])
def test_winograd_matches_float64_eager(monkeypatch, m):
    """Tails (9 x 11, 13 x 7: no multiple of m), a 1 x 1 image padded, no padding, channels
    that fill no vector (5 -> 7), batch 2; a bias, ReLU and a residual add in the epilogue."""
    _forced(monkeypatch, m)
    x, w, b = rand(2, 5, 9, 11, seed=1), rand(7, 5, 3, 3, seed=2), rand(7, seed=3)
    tall, one = rand(1, 5, 13, 7, seed=4), rand(3, 5, 1, 1, seed=5)
    residual = rand(2, 7, 9, 11, seed=6)

    def fn(x, w, b, tall, one, residual):
        return (
            F.relu(F.conv2d(x, w, b, padding=1) + residual),
            F.conv2d(tall, w, None, padding=1),
            F.conv2d(one, w, b, padding=1),
            F.conv2d(x, w, b),
        )

    inputs = [x, w, b, tall, one, residual]
    compiled = compile_fn(fn, inputs, constants=(1, 2))
    products = [s for s in compiled.steps if getattr(s, "spec", None) and "_wm" in s.spec.name]
    assert len(products) == 4
    got = compiled(inputs)
    for g, e in zip(got, fn(*[t.double() for t in inputs])):
        assert g.dtype == torch.float32 and g.shape == e.shape
        assert (g.double() - e).abs().max() <= TOLERANCE[m] * e.abs().max()


def test_folded_batch_norm_joins_the_last_kernel(monkeypatch):
    """conv + batch norm (folded into the transformed weights) + ReLU: seven kernels (the tiles,
    two per transform, the products), the last one the inverse's gather with the epilogue."""
    _forced(monkeypatch, 4)
    bn = torch.nn.BatchNorm2d(6).eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 2.0)
    x, w = rand(1, 4, 10, 10, seed=7), rand(6, 4, 3, 3, seed=8)
    params = [bn.weight.detach(), bn.bias.detach(), bn.running_mean, bn.running_var]

    def fn(x, w, gamma, beta, mean, var):
        y = F.conv2d(x, w, None, padding=1)
        return F.relu(F.batch_norm(y, mean, var, gamma, beta, False, 0.0, 1e-5))

    inputs = [x, w, *params]
    compiled = compile_fn(fn, inputs, constants=(1, 2, 3, 4, 5))
    assert len(compiled.steps) == 7
    expected = fn(*[t.double() for t in inputs])
    (got,) = compiled(inputs)
    assert (got.double() - expected).abs().max() <= TOLERANCE[4] * expected.abs().max()


def _rule(shape, weights_shape, stride=(1, 1), dilation=(1, 1), groups=1, dtype="float32",
          target="llvm"):  # fmt: skip
    ctx = types.SimpleNamespace(target=tf.Target(target))
    return winograd_tile(ctx, torch.empty(weights_shape), shape, stride, dilation, groups, dtype)


def test_rule_picks_the_tile_by_work():
    """F(4) for ResNet's 56, 28 and 14 layers; F(2) at 7 x 7 on 16 lanes (F(4)'s 4 tiles fill
    a quarter of a vector), F(4) there at batch 8 (32 tiles); direct for few channels at 224,
    small images, strides, dilation, groups, float64."""
    avx512 = "llvm -mcpu=znver4"
    assert _rule((1, 64, 56, 56), (64, 64, 3, 3), target=avx512) == 4
    assert _rule((1, 256, 14, 14), (256, 256, 3, 3), target=avx512) == 4
    assert _rule((1, 512, 7, 7), (512, 512, 3, 3), target=avx512) == 2
    assert _rule((8, 512, 7, 7), (512, 512, 3, 3), target=avx512) == 4
    assert _rule((1, 16, 224, 224), (16, 3, 3, 3), target=avx512) == 0
    assert _rule((1, 256, 4, 4), (256, 256, 3, 3), target=avx512) == 0
    assert _rule((1, 64, 28, 28), (64, 64, 3, 3), stride=(2, 2)) == 0
    assert _rule((1, 64, 54, 54), (64, 64, 3, 3), dilation=(2, 2)) == 0
    assert _rule((1, 64, 56, 56), (64, 32, 3, 3), groups=2) == 0
    assert _rule((1, 64, 56, 56), (64, 64, 3, 3), dtype="float64") == 0
    assert _rule((1, 64, 56, 56), (64, 64, 5, 5)) == 0
