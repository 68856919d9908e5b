"""2-D convolution, NCHW: the computation (declared once), a direct, register-tiled CPU schedule
whose decisions are knobs, and its template "builtin/conv2d"."""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.ops.knobs import choose, current_target, target_scope, workload
from tensorforge.target import Target


def _pair(value: int | tuple[int, int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def conv2d_nchw(
    batch: int,
    channels: int,
    height: int,
    width: int,
    filters: int,
    kernel: int | tuple[int, int] = 3,
    pad: int = 1,
    dtype: str = "float32",
    stride: int = 1,
):
    """out[b, f, y, x] = sum_{c, ky, kx} data[b, c, y*stride + ky - pad, x*stride + kx - pad]
    * weight[f, c, ky, kx], zero outside the data. `kernel` is a size or (height, width).

    Returns (data, weight, padded, out)."""
    kh, kw = _pair(kernel)
    data = te.placeholder((batch, channels, height, width), dtype=dtype, name="data")
    weight = te.placeholder((filters, channels, kh, kw), dtype=dtype, name="weight")
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
    oh, ow = (ph - kh) // stride + 1, (pw - kw) // stride + 1
    rc = te.reduce_axis((0, channels), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    out = te.compute(
        (batch, filters, oh, ow),
        lambda b, f, y, x: te.sum(
            padded[b, rc, y * stride + ry, x * stride + rx] * weight[f, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="conv",
    )
    return data, weight, padded, out


@tune.template("builtin/conv2d")
def conv2d_template(
    batch: int,
    channels: int,
    height: int,
    width: int,
    filters: int,
    kernel_h: int = 3,
    kernel_w: int = 3,
    stride: int = 1,
    pad: int = 1,
    dtype: str = "float32",
    parallel: bool = True,
):
    """NCHW convolution on the current CPU target; the default config is `schedule_conv2d`'s."""
    cfg = tune.get_config()
    out_h = (height + 2 * pad - kernel_h) // stride + 1
    out_w = (width + 2 * pad - kernel_w) // stride + 1
    cfg.add_flop(2.0 * batch * filters * out_h * out_w * channels * kernel_h * kernel_w)
    return _schedule(
        batch,
        channels,
        height,
        width,
        filters,
        (kernel_h, kernel_w),
        pad,
        dtype,
        stride,
        current_target(),
        parallel,
        cfg,
    )


def schedule_conv2d(
    batch: int,
    channels: int,
    height: int,
    width: int,
    filters: int,
    kernel: int | tuple[int, int] = 3,
    pad: int = 1,
    dtype: str = "float32",
    target: Target | None = None,
    parallel: bool = True,
    f_block: int | None = None,
    x_vectors: int | None = None,
    stride: int = 1,
):
    """The default conv2d schedule: template "builtin/conv2d" called plainly (its default config,
    or the best logged one under `tune.apply_history_best`). `f_block` / `x_vectors` given
    replace those knobs' choices. Returns (schedule, [data, weight, out])."""
    kh, kw = _pair(kernel)
    with target_scope(target):
        if f_block is None and x_vectors is None:
            args = (batch, channels, height, width, filters, kh, kw, stride, pad, dtype)
            return conv2d_template(*workload(args, parallel))
        return _schedule(
            batch,
            channels,
            height,
            width,
            filters,
            (kh, kw),
            pad,
            dtype,
            stride,
            current_target(),
            parallel,
            tune.get_config(),
            f_block,
            x_vectors,
        )


def filter_block(x_vectors: int, target: Target) -> int:
    """Filters a register tile of `x_vectors` vectors a row holds: accumulators as many as
    keep both FMA units busy and leave registers for the loads, 16 of AVX-512's 32 and 12 of
    AVX2's 16 (1 thread: 3x3 at 14² x 256, AVX-512, one 16-lane vector a row: 8 filters 1.89
    ms, 4 2.57; at 28² x 128 on AVX2, 4 vectors a row: 2 filters 2.58 ms, 4 4.95, spilled)."""
    wide = target.vector_bits >= 512
    budget, most = (16, 8) if wide else (12, 4)
    return next(f for f in (8, 4, 2, 1) if f <= most and f * x_vectors <= budget)


def _schedule(
    batch,
    channels,
    height,
    width,
    filters,
    kernel,
    pad,
    dtype,
    stride,
    target,
    parallel,
    cfg,
    f_block=None,
    x_vectors=None,
):
    """Accumulate an `f_block` x (`x_vectors` vectors of output columns) tile in registers.

    Each step of the reduction loads `x_vectors` input vectors and broadcasts `f_block` weights,
    feeding f_block * x_vectors FMAs. Output rows run in parallel; padding is computed first
    (or, with knob `inline_pad`, inside the reduction). By default a row of up to 4 vectors is
    one tile (its last vector masked), longer rows go in tiles of 3 vectors.
    """
    lanes = target.vector_lanes(dtype)
    kh, kw = kernel
    row_vectors = -(-((width + 2 * pad - kw) // stride + 1) // lanes)
    default_x = row_vectors if row_vectors <= 4 else 3
    chosen_f = choose(cfg, "f_block", filter_block(default_x, target), (1, 2, 4, 8))
    chosen_x = choose(cfg, "x_vectors", default_x, (1, 2, 3, 4))
    inline_pad = choose(cfg, "inline_pad", False, (True,))
    f_block = chosen_f if f_block is None else f_block
    x_vectors = chosen_x if x_vectors is None else x_vectors
    data, weight, padded, out = conv2d_nchw(
        batch, channels, height, width, filters, kernel, pad, dtype, stride
    )
    s = te.create_schedule(out.op)
    if inline_pad:
        s[padded].compute_inline()
    else:
        b, c, y, x = s[padded].op.axis
        if parallel:
            s[padded].parallel(c)
        xo, xi = s[padded].split(x, factor=lanes)
        s[padded].vectorize(xi)
    acc = s.cache_write(out, "local")
    _, y = register_tile(s, out, acc, f_block, lanes, x_vectors)
    if parallel:
        s[out].parallel(y)
    return s, [data, weight, out]


def register_tile(s, out, acc, f_block: int, lanes: int, x_vectors: int):
    """Tile `out` (b, f, y, x) in `f_block` filters x `x_vectors` vectors of a row, each tile
    accumulated in registers by `acc` (the convolution's reduction stage) over the whole window,
    the epilogue applied as the tile is stored. Returns (b, y), the loops to run in parallel."""
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=f_block)
    xo, xi = s[out].split(x, factor=lanes * x_vectors)
    s[out].reorder(b, y, fo, xo, fi, xi)
    s[out].vectorize(xi)
    s[acc].compute_at(s[out], xo)
    ab, af, ay, ax = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    s[acc].reorder(ab, ay, rc, ry, rx, af, ax)
    s[acc].unroll(af)
    axo, axi = s[acc].split(ax, factor=lanes)
    s[acc].unroll(axo)
    s[acc].vectorize(axi)
    return b, y
