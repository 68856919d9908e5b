"""Adaptive pools whose windows differ in size (7 -> 3), adaptive max pools, and layer norm over
several trailing dimensions as kernels, and group norm over positions of run-time sizes (they ran
eagerly: the graph fuzzer's declines), against eager torch: odd sizes, 3-d and 4-d inputs, weights computed or constant, bfloat16, run-time
sizes, nvcc."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_fuzz_found import dynamic  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def pools(x):
    return (
        F.adaptive_avg_pool2d(x, 3), F.adaptive_avg_pool2d(x, (5, 4)), F.adaptive_max_pool2d(x, 3),
        F.adaptive_max_pool2d(x, (1, 7)), F.adaptive_avg_pool2d(x[0], (2, 3)),
        F.adaptive_max_pool2d(x[0], (7, 11)), F.adaptive_max_pool2d(x, (13, 12)),
        F.adaptive_avg_pool2d(x, (6, 1)) * 2 - 1,
    )  # fmt: skip


def layer_norms(x, w, b, w3):
    return (
        F.layer_norm(x, x.shape[-2:], w, b), F.layer_norm(x, x.shape[-3:], w3),
        F.layer_norm(x, x.shape[-2:]) * 2 + 1, F.layer_norm(x, x.shape, eps=1e-3),
        F.layer_norm(x[0, 0], w.shape, w, b), F.layer_norm(x, x.shape[-1:], w[0], b[0]),
    )  # fmt: skip


def norm_inputs(seed):
    x = rand(2, 3, 7, 11, seed=seed) * 2 + 1
    return [
        x,
        rand(7, 11, seed=seed + 1),
        rand(7, 11, seed=seed + 2),
        rand(3, 7, 11, seed=seed + 3),
    ]


def test_adaptive_pools_of_windows_that_differ_in_size():
    check(pools, rand(2, 3, 7, 11, seed=1))
    x = rand(1, 2, 5, 5, seed=2)
    x[0, 1, 2, 2] = float("nan")  # a max pool's NaN: the windows holding it are NaN
    check(pools, x)


@pytest.mark.parametrize("constants", [(), (1, 2, 3)])
def test_layer_norm_over_several_dimensions(constants):
    check(layer_norms, *norm_inputs(4), constants=constants, rtol=2e-5)


def test_bfloat16_is_as_accurate_as_eager():
    cases = [(pools, [rand(2, 3, 7, 11, seed=5)]), (layer_norms, norm_inputs(6))]
    for fn, inputs in cases:
        check_bfloat16(fn, *(t.bfloat16() for t in inputs))


def test_run_time_sizes():
    def fn(x, w, b, w3):
        return (*pools(x), *layer_norms(x, w, b, w3))

    fast, nothing_eager = dynamic(fn)
    for h, w in ((7, 11), (9, 13)):
        x = rand(2, 3, h, w, seed=h)
        inputs = [x, rand(h, w, seed=1), rand(h, w, seed=2), rand(3, h, w, seed=3)]
        for got, expected in zip(fast(*inputs), fn(*inputs)):
            torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_cuda_builds_compile_with_nvcc(arch):
    x = rand(2, 3, 7, 11, seed=7)
    assert nvcc_problem(pools, [x], arch) is None
    assert nvcc_problem(layer_norms, norm_inputs(8), arch) is None
    assert nvcc_problem(pools, [x.bfloat16()], arch) is None


def test_group_norm_over_positions_of_run_time_sizes():
    # (it ran eagerly where the positions were run-time sizes: fuzz seeds 15125, 15182)
    w, b = rand(6, seed=1), rand(6, seed=2)

    def fn(x):
        return F.group_norm(x, 3, w, b) * 2, F.group_norm(x[:, :, :1], 2), F.group_norm(x, 6, w)

    fast, nothing_eager = dynamic(fn)
    for h, width in ((7, 11), (5, 3), (1, 9)):
        x = rand(2, 6, h, width, seed=h)
        for got, expected in zip(fast(x), fn(x)):
            torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    nothing_eager()


@pytest.mark.parametrize("size", [(56, 56), (7, 13)])
def test_channels_last_layer_norm_of_an_nchw_value_is_transposed_first(size):
    # ConvNeXt's block: a depthwise convolution (NCHW), permuted, then a layer norm over the
    # channels: each row a column of the convolution's output, read a channel apart (468 us at
    # 96 x 56²); a tiled transpose first (97 + 61 us)
    x, w, b = rand(2, 24, *size, seed=1), rand(24, seed=2), rand(24, seed=3)
    weight = rand(24, 1, 3, 3, seed=4)

    def block(x, w, b, weight):
        y = F.conv2d(x, weight, padding=1, groups=24).permute(0, 2, 3, 1)
        return F.layer_norm(y, (24,), w, b).permute(0, 3, 1, 2) + x

    compiled = check(block, x, w, b, weight, constants=(1, 2, 3), rtol=2e-5)
    sources = [str(getattr(step, "source", "")) for step in compiled.steps]
    assert any(s.startswith("transpose") for s in sources), sources
