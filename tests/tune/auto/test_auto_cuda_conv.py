"""The GPU first guess for a direct convolution tiles its filters (the axis only the weights
read) and whole rows of output positions, each shared slice a few channels under the whole
window; legal on odd shapes (nvcc here, NumPy on a GPU)."""

import math
import shutil
import subprocess

import numpy as np
import pytest
from auto_workloads import conv2d, conv_bn_relu, matmul, ref_conv2d

import tensorforge as tf
from tensorforge import te
from tensorforge.tune.auto import SearchTask
from tensorforge.tune.auto.analytic import AnalyticPolicy
from tensorforge.tune.auto.analytic_gpu import filter_axis
from tensorforge.tune.auto.decisions import Decisions

TARGET = "cuda -arch=sm_90"
NVCC = shutil.which("nvcc")
ODD = [(1, 3, 13, 11, 5), (2, 7, 5, 3, 1), (1, 16, 7, 7, 33), (1, 1, 1, 1, 1)]


def _guess(task):
    decisions = Decisions(0, policy=AnalyticPolicy(task.target_obj))
    trace, _, _ = task.generate(decisions)
    return trace, decisions.used


def test_filter_axis_finds_the_weights_only_axis():
    *_, conv = conv2d(1, 8, 9, 9, 12)
    assert filter_axis(conv.op) == 1
    *_, product = matmul(64, 32, 48)
    assert filter_axis(product.op) is None  # its last two axes read different inputs
    a = te.placeholder((4, 16, 8), name="a")
    b = te.placeholder((4, 8, 16), name="b")
    k = te.reduce_axis((0, 8), name="k")
    bmm = te.compute((4, 16, 16), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k))
    assert filter_axis(bmm.op) is None


def test_resnet_layer_guess_tiles_filters_and_whole_rows():
    task = SearchTask(conv2d, (1, 64, 56, 56, 64), TARGET)
    _, used = _guess(task)
    (tiles,) = [v for k, v in used.items() if k.startswith("gtile:")]
    (r_tiles,) = [v for k, v in used.items() if k.startswith("grtile:")]
    n, f, y, x = (math.prod(t) for t in tiles)
    assert n == 1 and f > 1 and 56 % y == 0 and 56 % x == 0
    assert tiles[3][-1] == 4 and f * y * x <= 64 * 64  # 4 adjacent columns a thread
    rc, ry, rx = (math.prod(t) for t in r_tiles)
    assert (ry, rx) == (3, 3) and 64 % rc == 0 and rc * 9 <= 64  # channels under the window


def conv_window_first(b, c, h, w, f):
    """A convolution whose reduction lists its window before its channels."""
    X = te.placeholder((b, c, h + 2, w + 2), name="X")
    W = te.placeholder((f, c, 3, 3), name="W")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    rc = te.reduce_axis((0, c), name="rc")
    Y = te.compute(
        (b, f, h, w),
        lambda n, o, y, x: te.sum(X[n, rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[ry, rx, rc]),
        name="Y",
    )
    return [X, W, Y]


def test_the_slice_takes_channels_under_the_window_in_any_order():
    task = SearchTask(conv_window_first, (1, 64, 14, 14, 64), TARGET)
    _, used = _guess(task)
    (r_tiles,) = [v for k, v in used.items() if k.startswith("grtile:")]
    ry, rx, rc = (math.prod(t) for t in r_tiles)
    assert (ry, rx) == (3, 3) and 64 % rc == 0 and 1 < rc and rc * 9 <= 64


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_conv_guesses_compile_on_odd_shapes(tmp_path):
    tasks = [SearchTask(conv2d, shape, TARGET) for shape in ODD]
    tasks.append(SearchTask(conv_bn_relu, (1, 8, 9, 9, 12), TARGET))
    tasks.append(SearchTask(conv_window_first, (1, 16, 7, 5, 9), TARGET))
    for k, task in enumerate(tasks):
        s, tensors = task.instantiate(_guess(task)[0])
        path = tmp_path / f"c{k}.cu"
        path.write_text(tf.build(s, tensors, target=task.target).get_source("cuda"))
        result = subprocess.run(
            [NVCC, "--ptx", "-arch=sm_90", str(path), "-o", str(tmp_path / f"c{k}.ptx")],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.cuda
@pytest.mark.parametrize("shape", ODD + [(1, 64, 28, 28, 64)])
def test_conv_guesses_match_numpy(shape):
    b, c, h, w, f = shape
    task = SearchTask(conv2d, shape, "cuda")
    s, tensors = task.instantiate(_guess(task)[0])
    mod = tf.build(s, tensors, target=task.target)
    rng = np.random.default_rng(sum(shape))
    data = rng.uniform(-1, 1, (b, c, h, w)).astype("float32")
    weight = rng.uniform(-1, 1, (f, c, 3, 3)).astype("float32")
    dev = tf.cuda(0)
    out = tf.nd.empty((b, f, h, w), "float32", dev)
    mod(tf.nd.array(data, dev), tf.nd.array(weight, dev), out)
    np.testing.assert_allclose(out.numpy(), ref_conv2d(data, weight), rtol=2e-4, atol=2e-4)
