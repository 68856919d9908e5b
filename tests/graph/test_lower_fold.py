"""col2im (F.fold) and max_unpool2d / max_unpool3d of a max pool's indices as gathers, against
eager torch: strides, padding, dilation, overlapping windows, NaN and ties in the pooled input;
indices that are not a pool's in the graph run eagerly (eager checks their range)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tests.graph.test_lowering import check, rand  # noqa: E402


@pytest.fixture(autouse=True)
def strict(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_GRAPH_STRICT", "1")  # a lowering bug fails, never falls back


def folds(c, c2, x, x3):
    m2, i2 = F.max_pool2d(x, 3, 2, 1, return_indices=True)  # overlapping windows
    m3, i3 = F.max_pool3d(x3, (2, 3, 2), (1, 2, 2), (1, 1, 0), return_indices=True)
    return (
        F.fold(c, (4, 5), 2),
        F.fold(c2, (7, 6), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),  # unbatched
        F.max_unpool2d(m2, i2, 3, 2, 1, output_size=x.shape[-2:]),
        F.max_unpool3d(m3 * 2, i3, (2, 3, 2), (1, 2, 2), (1, 1, 0), output_size=x3.shape[-3:]),
        F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=x.shape[-2:]),
    )


def inputs(seed):
    x = rand(2, 3, 7, 11, seed=seed)
    x[0, 1, 2, 2] = float("nan")  # the pool's index of a NaN: unpooled as NaN
    x[1, 0] = 1.0  # ties: the first in each window
    # c2: 3 channels of 3 x 2 taps over 4 x 6 blocks
    return [rand(2, 12, 12, seed=seed + 1), rand(18, 24, seed=seed + 2), x, rand(2, 3, 5, 7, 11, seed=seed + 3)]  # fmt: skip


def test_fold_and_max_unpool():
    check(folds, *inputs(1), rtol=2e-5)


def test_unpool_of_other_indices_runs_eagerly():
    x = rand(1, 2, 3, 3, seed=4)
    indices = torch.randint(0, 36, (1, 2, 3, 3))

    def fn(x, indices):  # to a size other than the pool's input: eager too
        m, i = F.max_pool2d(x, 2, 1, return_indices=True)
        return F.max_unpool2d(x, indices, 2, output_size=(6, 6)), F.max_unpool2d(m, i, 2) * 2

    check(fn, x, indices, fallbacks=2)


def on_the_gpu(fn, inputs, rtol):
    """`fn` compiled for CUDA (nothing eager) against eager torch on the GPU."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from tensorforge.graph import Options, compile_aten, decompositions

    ins = [t.cuda() for t in inputs]
    gm = make_fx(fn, decomposition_table=decompositions())(*ins)
    compiled = compile_aten(gm, ins, {}, Options(target="cuda"))
    assert compiled.program.fallbacks == []
    for got, e in zip(compiled(ins), fn(*ins)):
        torch.testing.assert_close(got, e, rtol=rtol, atol=rtol, equal_nan=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fold_and_max_unpool_match_eager_on_the_gpu():
    on_the_gpu(folds, inputs(5), rtol=2e-5)
