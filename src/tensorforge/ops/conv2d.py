"""2-D convolution, NCHW, stride 1: the computation and a direct, register-tiled CPU schedule."""

from __future__ import annotations

from tensorforge import te
from tensorforge.target import Target


def conv2d_nchw(
    batch: int,
    channels: int,
    height: int,
    width: int,
    filters: int,
    kernel: int = 3,
    pad: int = 1,
    dtype: str = "float32",
):
    """out[b, f, y, x] = sum_{c, ky, kx} data[b, c, y + ky - pad, x + kx - pad] * weight[f, c, ky, kx]."""
    data = te.placeholder((batch, channels, height, width), dtype=dtype, name="data")
    weight = te.placeholder((filters, channels, kernel, kernel), dtype=dtype, name="weight")
    ph, pw = height + 2 * pad, width + 2 * pad
    padded = te.compute(
        (batch, channels, ph, pw),
        lambda b, c, y, x: te.if_then_else(
            te.all(y >= pad, y < height + pad, x >= pad, x < width + pad),
            data[
                b, c, te.max(te.min(y - pad, height - 1), 0), te.max(te.min(x - pad, width - 1), 0)
            ],
            te.const(0, dtype),
        ),
        name="padded",
    )
    oh, ow = ph - kernel + 1, pw - kernel + 1
    rc = te.reduce_axis((0, channels), name="rc")
    ry = te.reduce_axis((0, kernel), name="ry")
    rx = te.reduce_axis((0, kernel), name="rx")
    out = te.compute(
        (batch, filters, oh, ow),
        lambda b, f, y, x: te.sum(
            padded[b, rc, y + ry, x + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]
        ),
        name="conv",
    )
    return data, weight, padded, out


def schedule_conv2d(
    batch: int,
    channels: int,
    height: int,
    width: int,
    filters: int,
    kernel: int = 3,
    pad: int = 1,
    dtype: str = "float32",
    target: Target | None = None,
    parallel: bool = True,
    f_block: int = 4,
    x_vectors: int | None = None,
):
    """Accumulate an `f_block` x (`x_vectors` vectors of output columns) tile in registers.

    Each step of the reduction loads `x_vectors` input vectors and broadcasts `f_block` weights,
    feeding f_block * x_vectors FMAs. Output rows run in parallel; padding is computed first.
    By default a row of up to 4 vectors is one tile (its last vector masked), longer rows go
    in tiles of 3 vectors.
    """
    target = target or Target("llvm")
    lanes = target.vector_lanes(dtype)
    if x_vectors is None:
        row_vectors = -(-(width + 2 * pad - kernel + 1) // lanes)
        x_vectors = row_vectors if row_vectors <= 4 else 3
    data, weight, padded, out = conv2d_nchw(
        batch, channels, height, width, filters, kernel, pad, dtype
    )
    s = te.create_schedule(out.op)
    b, c, y, x = s[padded].op.axis
    s[padded].parallel(c)
    xo, xi = s[padded].split(x, factor=lanes)
    s[padded].vectorize(xi)
    acc = s.cache_write(out, "local")
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=f_block)
    xo, xi = s[out].split(x, factor=lanes * x_vectors)
    s[out].reorder(b, y, fo, xo, fi, xi)
    s[out].vectorize(xi)
    if parallel:
        s[out].parallel(y)
    s[acc].compute_at(s[out], xo)
    ab, af, ay, ax = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(ab, ay, rc, ry, rx, af, ax)
    s[acc].unroll(af)
    axo, axi = s[acc].split(ax, factor=lanes)
    s[acc].unroll(axo)
    s[acc].vectorize(axi)
    return s, [data, weight, out]
