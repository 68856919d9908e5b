"""The split-K convolutions and products (graph/lower_conv_gemm.py), built for this CPU against
eager: the CUDA form's columns, partial products and their sum are plain te, so their indexing
is checked here (on the GPU: tests/graph/test_schedules_cuda.py)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_lowering import check, rand, strict  # noqa: E402, F401 (strict: autouse)


def split_partials(compiled) -> list:
    """The kernels of a compiled graph that compute split-K partial products."""
    return [
        s
        for s in compiled.steps
        if getattr(s, "spec", None) and s.spec.anchor and s.spec.anchor.info.get("split_k")
    ]


@pytest.mark.parametrize("splits", [1, 2, 3])
def test_split_k_convolutions_match_eager(monkeypatch, splits):
    """The CUDA split-K form (lower_conv_gemm: columns, partial products over slices of the
    reduction, their sum with the epilogue) built for this CPU, against eager: strides,
    dilation, padding, batch 2, filters no multiple of the 64-tile, a 1 x 1, an epilogue of
    bias, ReLU and an add."""
    from tensorforge.graph import lower_conv

    def forced(target, shape, channels, window, dtype):
        return splits if channels * window % splits == 0 else 0

    monkeypatch.setattr(lower_conv, "cuda_conv_splits", forced)
    x, w, b = rand(2, 6, 9, 7, seed=40), rand(5, 6, 3, 3, seed=41), rand(5, seed=42)
    w_1x1 = rand(7, 6, 1, 1, seed=43)

    def fn(x, w, b, w_1x1):
        return (
            F.relu(F.conv2d(x, w, b, padding=1)) + x[:, :5],
            F.conv2d(x, w, None, stride=2, dilation=2),
            F.conv2d(x, w_1x1, None, stride=2),
        )

    compiled = check(fn, x, w, b, w_1x1, constants=(1, 2, 3))
    partials = split_partials(compiled)
    assert {p.spec.anchor.info["shape"][0] for p in partials} == {splits}
    assert len(partials) == 3
    if splits == 1:  # one slice: the reduction padded to whole 16-term slices (54 and 6 terms)
        assert sorted(p.spec.anchor.info["k"] for p in partials) == [16, 64, 64]


@pytest.mark.parametrize("splits", [2, 4])
def test_split_k_products_match_eager(monkeypatch, splits):
    """Linear layers as partial products over slices of k and their sum (+ bias, GELU; an
    input of (batch, tokens, features) and a plain matrix), built for this CPU."""
    from tensorforge.graph import lower_linalg

    def forced(target, shape, k, dtype):
        return splits if k % splits == 0 else 0

    monkeypatch.setattr(lower_linalg, "cuda_matmul_splits", forced)
    x, w, b = rand(2, 5, 12, seed=50), rand(7, 12, seed=51), rand(7, seed=52)
    y, v = rand(3, 20, seed=53), rand(9, 20, seed=54)

    def fn(x, w, b, y, v):
        return F.gelu(F.linear(x, w, b)), F.linear(y, v)

    compiled = check(fn, x, w, b, y, v, constants=(1, 2, 4))
    partials = split_partials(compiled)
    assert len(partials) == 2
    assert {p.spec.anchor.info["shape"][0] for p in partials} == {splits}


def conv_products(compiled) -> list:
    """The kernels of a compiled graph whose anchor is a convolution as a matrix product."""
    return [
        s
        for s in compiled.steps
        if getattr(s, "spec", None)
        and s.spec.anchor
        and s.spec.anchor.kind == "matmul"
        and any(n.startswith("convolution") for n in s.spec.nodes)
    ]


@pytest.mark.parametrize("schedule", ["auto", "rules"])
def test_strided_one_by_one_convolutions_of_many_pixels_are_products(schedule):
    """Strided 1 x 1 convolutions (ResNet's downsamples) of more output pixels than four
    column panels: products over the input's pixels gathered once (16 filters; 18 x 19 pixels
    of stride 2, 19 x 13 of strides (2, 3) with padding, batch 2, an epilogue of bias, a
    residual and ReLU); of a few pixels (6 x 5): direct, vectors along the filters. Filters of
    no whole vector (13, 1: one channel) and a 3 x 3 of 7 are products at any size."""
    x = rand(2, 5, 35, 37, seed=50)
    x1 = rand(1, 1, 7, 5, seed=51)
    w16, w13, w1 = rand(16, 5, 1, 1, seed=52), rand(13, 5, 1, 1, seed=57), rand(1, 1, 1, 1, seed=53)
    w7 = rand(7, 5, 3, 3, seed=54)
    b16, b7 = rand(16, seed=55), rand(7, seed=56)

    def fn(x, x1, w16, w13, w1, w7, b16, b7):
        y = F.conv2d(x, w16, b16, stride=2)
        return (
            F.relu(y + y[:, :1]),
            F.conv2d(x, w16, None, stride=(2, 3), padding=(1, 0)),
            F.conv2d(x[:, :, :11, :9], w16, None, stride=2) * 2,
            F.conv2d(x[:, :, :11, :9], w13, None, stride=2),
            F.conv2d(x1, w1, None, stride=3),
            F.relu(F.conv2d(x, w7, b7, stride=2, padding=1)),
        )

    args = (x, x1, w16, w13, w1, w7, b16, b7)
    compiled = check(fn, *args, constants=(2, 3, 4, 5, 6, 7), schedule=schedule)
    assert len(conv_products(compiled)) == 5
    convs = [s for s in compiled.steps if getattr(s, "spec", None) and s.spec.anchor]
    direct = [s for s in convs if s.spec.anchor.info.get("lanes")]
    assert [s.spec.anchor.info["shape"][2:] for s in direct] == [(6, 5)]
