"""Depthwise convolutions with vectors along the channels (graph/lower_conv_depthwise.py), built
for this CPU against eager: odd sizes, strides, dilation, padding, batch 2, epilogues; and which
direct convolutions keep the rules' schedule under "auto"."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_lowering import check, rand, strict  # noqa: E402, F401


def channel_vector_convs(compiled) -> list:
    """The kernels of a compiled graph that pack their input in channel blocks."""
    return [
        s
        for s in compiled.steps
        if getattr(s, "spec", None) and s.spec.anchor and "pack" in s.spec.anchor.info
        and s.spec.anchor.kind == "conv2d"
    ]  # fmt: skip


def test_depthwise_channel_vectors_match_eager():
    """5 x 5 and larger depthwise kernels over channel blocks: 16 channels of a 13 x 11 image
    at batch 2 with bias, ReLU and a residual; stride (2, 1) with padding (2, 3); a 7 x 5
    window dilated (1, 2); 12 channels (blocks of 4 lanes) of stride 2, no padding; a 1 x 1
    image. Not over channel blocks: 6 channels (no whole vector), a 3 x 3, a channel
    multiplier of 2, and a grouped (not depthwise) convolution."""
    x = rand(2, 16, 13, 11, seed=60)
    x12, x6, x1 = rand(1, 12, 9, 17, seed=61), rand(1, 6, 8, 8, seed=62), rand(1, 16, 1, 1, seed=63)
    w5, w75 = rand(16, 1, 5, 5, seed=64), rand(16, 1, 7, 5, seed=65)
    w12, w6 = rand(12, 1, 5, 5, seed=66), rand(6, 1, 5, 5, seed=67)
    w3, w_mult, w_grouped = (
        rand(16, 1, 3, 3, seed=68),
        rand(32, 1, 5, 5, seed=69),
        rand(16, 2, 5, 5, seed=73),
    )
    b16 = rand(16, seed=70)

    def fn(x, x12, x6, x1, w5, w75, w12, w6, w3, w_mult, w_grouped, b16):
        return (
            F.relu(F.conv2d(x, w5, b16, padding=2, groups=16)) + x,
            F.conv2d(x, w5, None, stride=(2, 1), padding=(2, 3), groups=16),
            F.conv2d(x, w75, b16, padding=(3, 4), dilation=(1, 2), groups=16),
            F.conv2d(x12, w12, None, stride=2, groups=12),
            F.conv2d(x1, w5, None, padding=2, groups=16),
            F.conv2d(x6, w6, None, padding=2, groups=6),
            F.conv2d(x, w3, None, padding=1, groups=16),
            F.conv2d(x, w_mult, None, padding=2, groups=16),
            F.conv2d(x, w_grouped, None, padding=2, groups=8),
        )

    args = (x, x12, x6, x1, w5, w75, w12, w6, w3, w_mult, w_grouped, b16)
    compiled = check(fn, *args, constants=tuple(range(4, 12)))
    packed = channel_vector_convs(compiled)
    assert sorted(s.spec.anchor.info["shape"] for s in packed) == [
        (1, 12, 3, 7),
        (1, 16, 1, 1),
        (2, 16, 7, 13),
        (2, 16, 13, 11),
        (2, 16, 13, 11),
    ]


def test_depthwise_channel_vectors_of_bfloat16():
    """A bfloat16 depthwise 5 x 5 over channel blocks (float32 sums, rounded once), against
    eager's bfloat16 within its rounding."""
    x, w = rand(1, 16, 9, 9, seed=71).bfloat16(), rand(16, 1, 5, 5, seed=72).bfloat16()

    def fn(x, w):
        return F.conv2d(x, w, None, padding=2, groups=16)

    compiled = check(fn, x, w, constants=(1,), rtol=2e-2)
    assert len(channel_vector_convs(compiled)) == 1


def test_wide_windows_of_filter_vectors_keep_the_rules_schedule():
    """A 7 x 7 stride-2 convolution of 3 channels (a stem) with vectors along its 16 filters
    keeps the rules' schedule under "auto" (schedules_cpu_products.conv_keeps_rules), against
    eager at batch 2 and a 23 x 19 image; a 3 x 3 one takes the first guess."""
    from tensorforge.graph.schedules import FIRST_GUESS

    x, w7, w3 = rand(2, 3, 23, 19, seed=74), rand(16, 3, 7, 7, seed=75), rand(16, 3, 3, 3, seed=76)
    b = rand(16, seed=77)

    def fn(x, w7, w3, b):
        return F.relu(F.conv2d(x, w7, b, stride=2, padding=3)), F.conv2d(x, w3, None, padding=1)

    compiled = check(fn, x, w7, w3, b, constants=(1, 2, 3))
    convs = [s for s in compiled.steps if getattr(s, "spec", None) and s.spec.anchor]
    sources = {s.spec.anchor.info["taps"]: s.source for s in convs}
    assert sources[49] != FIRST_GUESS and sources[9] == FIRST_GUESS
