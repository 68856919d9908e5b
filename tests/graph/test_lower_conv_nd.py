"""1-d convolutions (the 2-d path over a unit height) and 3-d ones (a product over 3-d im2col
columns) as kernels, against eager torch: odd strides, padding ('same' too), dilation, groups
(depthwise), bias, weights constant or an input, transposed 1-d and 3-d, bfloat16, run-time sizes, nvcc."""

import shutil

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import lower_conv_nd as conv_nd  # noqa: E402
from tensorforge.graph.values import is_static  # noqa: E402
from tests.graph.test_lower_math import nvcc_problem  # noqa: E402
from tests.graph.test_lowering import check, check_bfloat16, compile_fn, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def conv1ds(x, w, dw, b, tw):
    return (
        F.conv1d(x, w, b), F.conv1d(x, w, None, 2, 3, 2), F.conv1d(x, w, b, padding="same"),
        F.relu(F.conv1d(x, dw, b, 1, 5, 1, 6)), F.conv1d(x[:, :, :1], w, None, 1, 1),
        F.conv_transpose1d(x, tw, b[:5], 3, 1, 1), F.conv1d(x, w, b, 3, 0, 1) * 2,
    )  # fmt: skip


def conv1d_inputs(seed, length=13):
    return [
        rand(2, 6, length, seed=seed), rand(6, 6, 3, seed=seed + 1), rand(6, 1, 5, seed=seed + 2),
        rand(6, seed=seed + 3), rand(6, 5, 3, seed=seed + 4),
    ]  # fmt: skip


def conv3ds(x, w, gw, b):
    return (
        F.conv3d(x, w, b[:3]), F.conv3d(x, w, None, (1, 2, 3), (1, 0, 2), (2, 1, 1)),
        F.conv3d(x, gw, b, 1, 1, 1, 2) + 1, F.conv3d(x, w, b[1:], padding="same"),
    )  # fmt: skip


def transposed3ds(x, w, gw, b, uw):
    return (
        F.conv_transpose3d(x[:, :3], w, b, 2, 1),
        F.conv_transpose3d(x, gw, b, (2, 1, 2), (0, 1, 1), (1, 0, 1), 2, (1, 2, 1)),
        F.conv_transpose3d(x, uw, b[:3], 2) * 2,  # kernel = stride: a matrix product
    )  # fmt: skip


def conv3d_inputs(seed):
    return [
        rand(2, 4, 5, 7, 6, seed=seed), rand(3, 4, 3, 2, 3, seed=seed + 1),
        rand(4, 2, 1, 3, 3, seed=seed + 2), rand(4, seed=seed + 3),
    ]  # fmt: skip


@pytest.mark.parametrize("constants", [(), (1, 2, 3, 4)])
def test_conv1d(constants):
    check(conv1ds, *conv1d_inputs(1), constants=constants, rtol=2e-5)


def test_conv1d_of_an_empty_batch():
    x, w = rand(0, 3, 7), rand(5, 3, 2, seed=1)
    check(lambda x, w: F.conv1d(x, w, padding=1), x, w)


def test_conv1d_folds_its_batch_norm():
    m = torch.nn.Sequential(torch.nn.Conv1d(3, 5, 3), torch.nn.BatchNorm1d(5)).eval()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    with torch.no_grad():
        x = rand(2, 3, 11, seed=3)
        compiled = torch.compile(m, backend="tensorforge")
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constants", [(), (1, 2, 3)])
def test_conv3d(constants):
    check(conv3ds, *conv3d_inputs(2), constants=constants, rtol=2e-5)


@pytest.mark.parametrize("schedule", ["auto", "rules"])
def test_conv3d_with_vectors_along_the_filters(schedule):
    """Constant weights of whole filter vectors (16, 8 filters): direct, depths and rows one
    output dimension (no rows between depths, no copy): strides, padding, dilation, batch 2,
    odd sizes, an epilogue of bias, a per-channel residual and ReLU, and a folded batch norm."""
    x = rand(2, 3, 5, 9, 7, seed=20)
    w16, w8, b = rand(16, 3, 3, 3, 2, seed=21), rand(8, 3, 2, 3, 3, seed=22), rand(16, seed=23)

    def fn(x, w16, w8, b):
        y = F.conv3d(x, w16, b, (1, 2, 1), (1, 0, 1), (1, 1, 2))
        return (
            F.relu(y + b[:, None, None, None] * y.tanh()),
            F.conv3d(x, w8, None, (2, 1, 3), (0, 2, 1), (2, 1, 1)),
        )

    compiled = check(fn, x, w16, w8, b, constants=(1, 2, 3), rtol=2e-5, schedule=schedule)
    convs = [s for s in compiled.steps if getattr(s, "spec", None) and s.spec.anchor]
    assert len(convs) == 2 and all(s.spec.anchor.info.get("lanes") for s in convs)
    assert [s.spec.anchor.info["shape"] for s in convs] == [(2, 16, 5 * 4, 7), (2, 8, 2 * 11, 3)]
    m = torch.nn.Sequential(torch.nn.Conv3d(3, 16, 3, padding=1), torch.nn.BatchNorm3d(16)).eval()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    with torch.no_grad():
        compiled = torch.compile(m, backend="tensorforge", options={"schedule": schedule})
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("constants", [(), (1, 2, 4)])
def test_transposed_conv3d(constants, monkeypatch):
    # on the CPU, eager beats the kernel over the spread input: checked with the gate off
    monkeypatch.setattr(conv_nd, "spread_is_slower", lambda target: False)
    check(transposed3ds, *conv3d_inputs(3), rand(4, 3, 2, 2, 2, seed=9), constants=constants, rtol=2e-5)  # fmt: skip


def test_transposed_conv3d_runs_eagerly_on_the_cpu_but_kernel_equal_to_stride():
    inputs = [*conv3d_inputs(3), rand(4, 3, 2, 2, 2, seed=9)]
    compiled = compile_fn(transposed3ds, inputs, constants=(1, 2, 4))
    reasons = [r for _, _, r in compiled.program.fallbacks]
    assert reasons == ["a 3-d transposed convolution on the CPU (eager's is faster)"] * 2


def test_bfloat16_is_as_accurate_as_eager():
    for fn, inputs in ((conv1ds, conv1d_inputs(4)), (conv3ds, conv3d_inputs(5))):
        check_bfloat16(fn, *(t.bfloat16() for t in inputs))


def test_run_time_sizes():
    def fn(x, w, dw, b, tw, x3, w3, gw3, b3):
        return (*conv1ds(x, w, dw, b, tw), *conv3ds(x3, w3, gw3, b3))

    # on the CPU at run-time sizes they run eagerly (the 2-d path's generic schedule was 5x
    # slower than eager); their kernels at run-time sizes are checked with the gate off
    from tests.graph.test_dynamic_and_cuda import _find_compiled
    from tests.graph.test_dynamic_rows import compiled_once

    for gate in (True, False):
        if not gate:
            conv_nd.is_static = lambda sizes: True
        try:
            fast, graphs = compiled_once(fn)
            for length in (13, 17):
                inputs = conv1d_inputs(length, length) + conv3d_inputs(length)
                for got, expected in zip(fast(*inputs), fn(*inputs)):
                    torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
        finally:
            conv_nd.is_static = is_static
        reasons = {r for g in graphs for _, _, r in _find_compiled(g).program.fallbacks}
        assert reasons == ({"a 1-d convolution of run-time sizes", "a 3-d convolution of run-time sizes"} if gate else set())  # fmt: skip


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_builds_compile_with_nvcc():
    def fn(x, w, dw, b, tw, x3, w3, gw3, b3, uw3):
        return (
            *conv1ds(x, w, dw, b, tw), *conv3ds(x3, w3, gw3, b3),
            *transposed3ds(x3, w3, gw3, b3, uw3),
        )  # fmt: skip

    inputs = conv1d_inputs(6) + conv3d_inputs(7) + [rand(4, 3, 2, 2, 2, seed=8)]
    assert nvcc_problem(fn, inputs, "sm_90a") is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_conv1d_and_conv3d_match_eager_on_the_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    def fn(x, w, dw, b, tw, x3, w3, gw3, b3, uw3):
        return (
            *conv1ds(x, w, dw, b, tw), *conv3ds(x3, w3, gw3, b3),
            *transposed3ds(x3, w3, gw3, b3, uw3),
        )  # fmt: skip

    ins = conv1d_inputs(8) + conv3d_inputs(9) + [rand(4, 3, 2, 2, 2, seed=10)]
    inputs = [t.cuda() for t in ins]
    gm = make_fx(fn, decomposition_table=decompositions())(*inputs)
    compiled = compile_aten(gm, inputs, {}, Options(target="cuda"))
    assert compiled.program.fallbacks == []
    with torch.backends.cudnn.flags(allow_tf32=False):
        expected = fn(*inputs)
    for got, e in zip(compiled(inputs), expected):
        torch.testing.assert_close(got, e, rtol=1e-4, atol=1e-4)
