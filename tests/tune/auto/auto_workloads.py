"""Workloads the auto-scheduler tests draw schedules for, with their NumPy references."""

from __future__ import annotations

import math

import numpy as np

from tensorforge import te


def matmul(n, k, m):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C]


def matmul_bias_gelu(n, k, m):
    A, B, C = matmul(n, k, m)
    bias = te.placeholder((m,), name="bias")
    D = te.compute((n, m), lambda i, j: C[i, j] + bias[j], name="D")
    E = te.compute(
        (n, m), lambda i, j: 0.5 * D[i, j] * (1.0 + te.erf(D[i, j] * 0.7071067811865476)), name="E"
    )
    return [A, B, bias, E]


def conv2d(b, c, h, w, f, kh=3, pad=1):
    data = te.placeholder((b, c, h, w), name="data")
    weight = te.placeholder((f, c, kh, kh), name="weight")
    padded = te.compute(
        (b, c, h + 2 * pad, w + 2 * pad),
        lambda n, ci, y, x: te.if_then_else(
            te.all(y >= pad, y < h + pad, x >= pad, x < w + pad),
            data[n, ci, te.min(te.max(y - pad, 0), h - 1), te.min(te.max(x - pad, 0), w - 1)],
            te.const(0.0, "float32"),
        ),
        name="padded",
    )
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kh), name="rx")
    oh, ow = h + 2 * pad - kh + 1, w + 2 * pad - kh + 1
    out = te.compute(
        (b, f, oh, ow),
        lambda n, ff, y, x: te.sum(
            padded[n, rc, y + ry, x + rx] * weight[ff, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    return [data, weight, out]


def conv_bn_relu(b, c, h, w, f):
    data, weight, conv = conv2d(b, c, h, w, f)
    scale = te.placeholder((f,), name="scale")
    shift = te.placeholder((f,), name="shift")
    bn = te.compute(
        conv.shape, lambda n, ff, y, x: conv[n, ff, y, x] * scale[ff] + shift[ff], name="bn"
    )
    relu = te.compute(conv.shape, lambda n, ff, y, x: te.max(bn[n, ff, y, x], 0.0), name="relu")
    return [data, weight, scale, shift, relu]


def softmax(n, m):
    x = te.placeholder((n, m), name="x")
    k1 = te.reduce_axis((0, m), name="k1")
    mx = te.compute((n,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    e = te.compute((n, m), lambda i, j: te.exp(x[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, m), name="k2")
    sm = te.compute((n,), lambda i: te.sum(e[i, k2], axis=k2), name="row_sum")
    y = te.compute((n, m), lambda i, j: e[i, j] / sm[i], name="y")
    return [x, y]


def layer_norm(n, m, eps=1e-5):
    x = te.placeholder((n, m), name="x")
    gamma = te.placeholder((m,), name="gamma")
    beta = te.placeholder((m,), name="beta")
    return [x, gamma, beta, _layer_norm_of(x, gamma, beta, n, m, eps)]


def _layer_norm_of(x, gamma, beta, n, m, eps):
    k1 = te.reduce_axis((0, m), name="k1")
    k2 = te.reduce_axis((0, m), name="k2")
    total = te.compute((n,), lambda i: te.sum(x[i, k1], axis=k1), name="total")
    squares = te.compute((n,), lambda i: te.sum(x[i, k2] * x[i, k2], axis=k2), name="squares")

    def normalize(i, j):
        mean = total[i] * (1.0 / m)
        var = squares[i] * (1.0 / m) - mean * mean
        return (x[i, j] - mean) * te.rsqrt(var + eps) * gamma[j] + beta[j]

    return te.compute((n, m), normalize, name="y")


def add_layer_norm(n, m, eps=1e-5):
    a = te.placeholder((n, m), name="a")
    r = te.placeholder((n, m), name="residual")
    gamma = te.placeholder((m,), name="gamma")
    beta = te.placeholder((m,), name="beta")
    x = te.compute((n, m), lambda i, j: a[i, j] + r[i, j], name="add")
    return [a, r, gamma, beta, _layer_norm_of(x, gamma, beta, n, m, eps)]


# -- NumPy references -------------------------------------------------------------------------------


def _erf(x):
    return np.vectorize(math.erf)(x)


def ref_matmul(A, B):
    return A @ B


def ref_matmul_bias_gelu(A, B, bias):
    d = A.astype(np.float64) @ B + bias
    return 0.5 * d * (1 + _erf(d * 0.7071067811865476))


def ref_conv2d(data, weight, pad=1):
    b, c, h, w = data.shape
    f, _, kh, kw = weight.shape
    p = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, w + 2 * pad - kw + 1
    out = np.zeros((b, f, oh, ow))
    for y in range(kh):
        for x in range(kw):
            out += np.einsum("bchw,fc->bfhw", p[:, :, y : y + oh, x : x + ow], weight[:, :, y, x])
    return out


def ref_conv_bn_relu(data, weight, scale, shift):
    out = ref_conv2d(data, weight) * scale[None, :, None, None] + shift[None, :, None, None]
    return np.maximum(out, 0)


def ref_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def ref_layer_norm(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def ref_add_layer_norm(a, r, gamma, beta):
    return ref_layer_norm(a + r, gamma, beta)


# name -> (workload, awkward small args, reference)
CASES = {
    "matmul": (matmul, (37, 29, 41), ref_matmul),
    "matmul_bias_gelu": (matmul_bias_gelu, (23, 17, 35), ref_matmul_bias_gelu),
    "conv2d": (conv2d, (1, 5, 11, 13, 7), ref_conv2d),
    "conv_bn_relu": (conv_bn_relu, (1, 3, 9, 7, 5), ref_conv_bn_relu),
    "softmax": (softmax, (7, 53), ref_softmax),
    "layer_norm": (layer_norm, (5, 67), ref_layer_norm),
    "add_layer_norm": (add_layer_norm, (3, 1), ref_add_layer_norm),
}


def check(task, s, tensors, reference, seed=0):
    """Build `s` and compare its output with `reference` on random inputs."""
    import tensorforge as tf
    from tensorforge.te.tensor import PlaceholderOp

    rng = np.random.default_rng(seed)
    inputs = [t for t in tensors if isinstance(t.op, PlaceholderOp)]
    arrays = [rng.uniform(-1, 1, [int(e.value) for e in t.shape]).astype("float32") for t in inputs]
    outputs = [
        np.full([int(e.value) for e in t.shape], np.nan, "float32")
        for t in tensors
        if t not in inputs
    ]
    mod = tf.build(s, tensors, target=task.target)
    mod(*arrays, *outputs)
    expected = reference(*arrays)
    np.testing.assert_allclose(outputs[0], expected, rtol=2e-4, atol=2e-4)
