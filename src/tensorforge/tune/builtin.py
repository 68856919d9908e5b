"""Built-in templates for `tensorforge tune`: "builtin/matmul" and "builtin/conv2d" (CPU)."""

from __future__ import annotations

from tensorforge import te
from tensorforge.tune.template import get_config, template


@template("builtin/matmul")
def matmul(N: int, L: int, M: int, dtype: str = "float32", parallel: bool = True):
    """C[N, M] = A[N, L] @ B[L, M], tiled on three levels.

    Loops: yo, xo | ko | ym, xm | ki | yi (optionally unrolled), xi (vectorized). Inner tiles are
    at most 64 wide; for 512³ the space has 43 * 43 * 10 * 2 = 36980 configs.
    """
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis

    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=3, max_factor=64)
    cfg.define_split("tile_x", x, num_outputs=3, max_factor=64)
    cfg.define_split("tile_k", k, num_outputs=2)
    cfg.define_knob("unroll_y", [0, 1])

    yo, ym, yi = cfg["tile_y"].apply(s, C, y)
    xo, xm, xi = cfg["tile_x"].apply(s, C, x)
    ko, ki = cfg["tile_k"].apply(s, C, k)
    s[C].reorder(yo, xo, ko, ym, xm, ki, yi, xi)
    if cfg["tile_x"].size[-1] > 1:
        s[C].vectorize(xi)
    if cfg["unroll_y"].val and cfg["tile_y"].size[-1] > 1:
        s[C].unroll(yi)
    if parallel:
        s[C].parallel(s[C].fuse(yo, xo))
    return s, [A, B, C]


@template("builtin/conv2d")
def conv2d(
    N: int,
    C: int,
    H: int,
    W: int,
    F: int,
    KH: int,
    KW: int,
    stride: int = 1,
    pad: int = 1,
    dtype: str = "float32",
    parallel: bool = True,
):
    """NCHW direct convolution, `F` filters of `KH x KW`, with a zero-padded input stage.

    Tiles the filters, output rows and columns and the input channels; vectorizes the inner
    columns and optionally unrolls the inner filters and computes the padding inline.
    """
    data = te.placeholder((N, C, H, W), name="data", dtype=dtype)
    kernel = te.placeholder((F, C, KH, KW), name="kernel", dtype=dtype)
    OH = (H + 2 * pad - KH) // stride + 1
    OW = (W + 2 * pad - KW) // stride + 1
    padded = te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, y, x: te.if_then_else(
            te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
            data[n, c, y - pad, x - pad],
            te.const(0, dtype),
        ),
        name="padded",
    )
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, KH), name="ry")
    rx = te.reduce_axis((0, KW), name="rx")
    out = te.compute(
        (N, F, OH, OW),
        lambda n, f, y, x: te.sum(
            padded[n, rc, y * stride + ry, x * stride + rx] * kernel[f, rc, ry, rx],
            axis=[rc, ry, rx],
        ),
        name="conv",
    )
    s = te.create_schedule(out.op)
    n, f, y, x = s[out].op.axis

    cfg = get_config()
    cfg.define_split("tile_f", f, num_outputs=2, max_factor=32)
    cfg.define_split("tile_y", y, num_outputs=2, max_factor=16)
    cfg.define_split("tile_x", x, num_outputs=2, max_factor=64)
    cfg.define_split("tile_rc", rc, num_outputs=2, max_factor=64)
    cfg.define_knob("unroll_f", [0, 1])
    cfg.define_knob("inline_pad", [0, 1])

    fo, fi = cfg["tile_f"].apply(s, out, f)
    yo, yi = cfg["tile_y"].apply(s, out, y)
    xo, xi = cfg["tile_x"].apply(s, out, x)
    rco, rci = cfg["tile_rc"].apply(s, out, rc)
    s[out].reorder(n, fo, yo, xo, rco, ry, rx, rci, fi, yi, xi)
    if cfg["tile_x"].size[-1] > 1:
        s[out].vectorize(xi)
    if cfg["unroll_f"].val and cfg["tile_f"].size[-1] > 1:
        s[out].unroll(fi)
    if cfg["inline_pad"].val:
        s[padded].compute_inline()
    if parallel:
        s[out].parallel(s[out].fuse(n, fo))
    return s, [data, kernel, out]


DEFAULT_ARGS = {
    "matmul": [512, 512, 512, "float32"],
    "conv2d": [1, 64, 56, 56, 64, 3, 3, 1, 1, "float32"],
}


@template("builtin/matmul_cuda")
def matmul_cuda(N: int, L: int, M: int, dtype: str = "float32"):
    """C = A @ B on a GPU: blocks of threads, each thread accumulating a yi x xi tile in registers.

    C's rows split into (blockIdx.y, threadIdx.y, yi), columns into (blockIdx.x, threadIdx.x,
    xi); a local (register) copy of C accumulates over k split into (ko, ki). Configs whose blocks
    exceed the GPU's thread limit fail to run and are recorded as such.
    """
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    y, x = s[C].op.axis

    cfg = get_config()
    cfg.define_split("tile_y", y, num_outputs=3, max_factor=32)
    cfg.define_split("tile_x", x, num_outputs=3, max_factor=32)
    cfg.define_split("tile_k", k, num_outputs=2, max_factor=32)
    cfg.define_knob("unroll_k", [0, 1])

    by, ty, yi = cfg["tile_y"].apply(s, C, y)
    bx, tx, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], tx)
    yl, xl = s[CL].op.axis
    ko, ki = cfg["tile_k"].apply(s, CL, s[CL].op.reduce_axis[0])
    s[CL].reorder(ko, ki, yl, xl)
    if cfg["unroll_k"].val and cfg["tile_k"].size[-1] > 1:
        s[CL].unroll(ki)
    return s, [A, B, C]
