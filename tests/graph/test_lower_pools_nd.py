"""3-d max and average pools (adaptive too), 1-d pools, and max pools whose indices are read (torch's flat
index within each plane) as kernels, against eager torch: odd sizes, stride, padding, dilation,
ceil_mode, NaN, bfloat16, run-time sizes, nvcc; and norms of batch statistics (instance norm)."""

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


def max_pools(x, x3):
    m2, i2 = F.max_pool2d(x, 3, 2, 1, 2, ceil_mode=True, return_indices=True)
    m3, i3 = F.max_pool3d(x3, (2, 3, 2), (1, 2, 2), (1, 1, 0), return_indices=True)
    m1, i1 = F.max_pool1d(x[0], 2, 3, 1, ceil_mode=True, return_indices=True)
    return (
        m2, i2, m3 * 2, i3, m1, i1, F.max_pool3d(x3, 3, 2, ceil_mode=True),
        F.max_pool2d(x, 2, return_indices=True)[1],
    )  # fmt: skip


def pools(x, x3):
    return (
        *max_pools(x, x3), F.avg_pool3d(x3, 2),
        F.avg_pool3d(x3, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        F.avg_pool3d(x3, (1, 2, 3), 1, (0, 1, 1), divisor_override=5), F.avg_pool1d(x[0], 3, 2, 1),
        F.local_response_norm(x, 3), F.adaptive_avg_pool3d(x3, (2, 4, 3)),
        *F.adaptive_max_pool3d(x3, (3, 4, 5), return_indices=True),
        F.adaptive_max_pool3d(x3 * 2, (4, 2, 5)),
    )  # fmt: skip


def batch_statistics_norms(x, w, b):
    return (
        F.instance_norm(x), F.instance_norm(x, weight=w, bias=b, eps=1e-3),
        F.batch_norm(x[:, :, 0], None, None, w, b, training=True, eps=0.1),
    )  # fmt: skip


def inputs(seed, h=7, w=11):
    return [rand(2, 3, h, w, seed=seed), rand(2, 3, 5, h, w, seed=seed + 1)]


def test_pools():
    x, x3 = inputs(2)
    x[0, 1, 2, 2] = x[0, 1, 3, 4] = float("nan")  # an index of a NaN: the last in the window
    x[1, 0] = 1.0  # ties: the first in the window
    x3[1, 2, :2] = float("nan")
    check(pools, x, x3, rtol=2e-5)


def test_bfloat16_is_as_accurate_as_eager():
    # (eager has no bfloat16 avg_pool3d on the CPU)
    check_bfloat16(max_pools, *(t.bfloat16() for t in inputs(3)))


def test_run_time_sizes_and_norms_of_batch_statistics():
    # (norms through Dynamo: its graphs hold _native_batch_norm_legit.no_stats, make_fx's not)
    w, b = rand(3, seed=7), rand(3, seed=8)

    def fn(x, x3):
        return (*pools(x, x3), *batch_statistics_norms(x * 3 + 1, w, b))

    fast, nothing_eager = dynamic(fn)
    for h, width in ((7, 11), (9, 8)):
        ins = inputs(h, h, width)
        for got, expected in zip(fast(*ins), fn(*ins)):
            torch.testing.assert_close(got, expected, rtol=2e-5, atol=2e-5)
    nothing_eager()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_builds_compile_with_nvcc():
    assert nvcc_problem(pools, inputs(4), "sm_90a") is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_pools_match_eager_on_the_gpu():
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    ins = [t.cuda() for t in inputs(5)]
    gm = make_fx(pools, decomposition_table=decompositions())(*ins)
    compiled = compile_aten(gm, ins, {}, Options(target="cuda"))
    assert compiled.program.fallbacks == []
    for got, e in zip(compiled(ins), pools(*ins)):
        torch.testing.assert_close(got, e, rtol=1e-5, atol=1e-5)
