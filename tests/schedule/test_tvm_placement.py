"""Placements TVM programs write, judged on the finished schedule: a TOPI-style softmax (a stage
computed at a consumer it feeds only through another stage computed there) and the GPU conv2d
tutorial's statement order (shared caches attached before the local caches reading them are).
"""

import shutil
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.testing import check_against_numpy

# -- softmax, scheduled the TOPI way -----------------------------------------------------------


def softmax(shape):
    x = te.placeholder(shape, name="x")
    *outer, n = shape
    k = te.reduce_axis((0, n), name="k")
    max_elem = te.compute(tuple(outer), lambda *i: te.max(x[(*i, k)], axis=k), name="max_elem")
    exp = te.compute(shape, lambda *i: te.exp(x[i] - max_elem[i[:-1]]), name="exp")
    k2 = te.reduce_axis((0, n), name="k2")
    expsum = te.compute(tuple(outer), lambda *i: te.sum(exp[(*i, k2)], axis=k2), name="expsum")
    out = te.compute(shape, lambda *i: exp[i] / expsum[i[:-1]], name="softmax")
    return x, max_elem, exp, expsum, out


def softmax_ref(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", [(3, 5, 37), (7, 1)])
def test_topi_softmax_schedule(shape):
    x, max_elem, exp, expsum, out = softmax(shape)
    s = te.create_schedule(out.op)
    outer = s[out].fuse(*s[out].op.axis[:-1])
    s[out].parallel(outer)
    # max_elem first: `out` reads it only through exp, which is attached two lines later
    s[max_elem].compute_at(s[out], outer)
    s[expsum].compute_at(s[out], outer)
    s[exp].compute_at(s[out], outer)
    inner = s[out].op.axis[-1]
    if shape[-1] > 8:
        _, vec = s[out].split(inner, factor=8)
        s[out].vectorize(vec)
    check_against_numpy(s, [x], [out], softmax_ref, rtol=1e-5, atol=1e-6)


def test_softmax_with_exp_left_at_root_is_refused_at_lowering():
    x, max_elem, exp, expsum, out = softmax((4, 9))
    s = te.create_schedule(out.op)
    s[max_elem].compute_at(s[out], s[out].op.axis[0])  # accepted now: out depends on it
    with pytest.raises(
        tf.ScheduleError,
        match=r"'max_elem' is computed at 'i0' of 'softmax', but 'softmax' does not consume "
        r"'max_elem' .*read by: exp",
    ):
        tf.lower(s, [x, out])


# -- the GPU conv2d tutorial's schedule ----------------------------------------------------------

SIZE, CIN, COUT, BATCH, KERNEL, PAD = 6, 8, 32, 32, 3, 1
BLOCK, THREADS, STEP = 16, 4, 4


def conv2d_hwcn():
    """A stride-1 conv2d in TVM's HWCN layout, with an explicitly padded input stage."""
    A = te.placeholder((SIZE, SIZE, CIN, BATCH), name="A")
    W = te.placeholder((KERNEL, KERNEL, CIN, COUT), name="W")
    padded = SIZE + 2 * PAD
    Apad = te.compute(
        (padded, padded, CIN, BATCH),
        lambda y, x, c, n: te.if_then_else(
            te.all(y >= PAD, y - PAD < SIZE, x >= PAD, x - PAD < SIZE),
            A[y - PAD, x - PAD, c, n],
            0.0,
        ),
        name="Apad",
    )
    rc = te.reduce_axis((0, CIN), name="rc")
    ry = te.reduce_axis((0, KERNEL), name="ry")
    rx = te.reduce_axis((0, KERNEL), name="rx")
    out = SIZE + 2 * PAD - KERNEL + 1
    B = te.compute(
        (out, out, COUT, BATCH),
        lambda y, x, f, n: te.sum(
            Apad[y + ry, x + rx, rc, n] * W[ry, rx, rc, f], axis=[rc, ry, rx]
        ),
        name="B",
    )
    return A, W, Apad, B


def conv2d_reference(a, w):
    padded = np.pad(a, ((PAD, PAD), (PAD, PAD), (0, 0), (0, 0)))
    out = np.zeros((SIZE, SIZE, COUT, BATCH), dtype=np.float64)
    for ry in range(KERNEL):
        for rx in range(KERNEL):
            window = padded[ry : ry + SIZE, rx : rx + SIZE]  # (y, x, c, n)
            out += np.einsum("yxcn,cf->yxfn", window, w[ry, rx])
    return out.astype(np.float32)


def conv2d_gpu_schedule(vthreads: bool = False):
    """TVM's statement order: caches declared, the output tiled and bound (with two virtual
    threads per axis if `vthreads`, as the tutorial does), the local cache attached, then the
    shared caches attached *before* the local caches that read them."""
    A, W, Apad, B = conv2d_hwcn()
    s = te.create_schedule(B.op)
    s[Apad].compute_inline()
    AA = s.cache_read(Apad, "shared", [B])
    WW = s.cache_read(W, "shared", [B])
    AL = s.cache_read(AA, "local", [B])
    WL = s.cache_read(WW, "local", [B])
    BL = s.cache_write(B, "local")

    hi, wi, fi, ni = s[B].op.axis
    bz = s[B].fuse(hi, wi)
    by, fi = s[B].split(fi, factor=BLOCK)
    bx, ni = s[B].split(ni, factor=BLOCK)
    virtual = []
    if vthreads:
        tyz, fi = s[B].split(fi, nparts=2)
        txz, ni = s[B].split(ni, nparts=2)
        virtual = [tyz, txz]
        s[B].bind(tyz, te.thread_axis("vthread"))
        s[B].bind(txz, te.thread_axis("vthread"))
    ty, fi = s[B].split(fi, nparts=THREADS)
    tx, ni = s[B].split(ni, nparts=THREADS)
    s[B].reorder(bz, by, bx, *virtual, ty, tx, fi, ni)
    s[B].bind(bz, te.thread_axis("blockIdx.z"))
    s[B].bind(by, te.thread_axis("blockIdx.y"))
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(ty, te.thread_axis("threadIdx.y"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))

    s[BL].compute_at(s[B], tx)
    yi, xi, fl, nl = s[BL].op.axis
    rc, ry, rx = s[BL].op.reduce_axis
    rco, rci = s[BL].split(rc, factor=STEP)
    s[BL].reorder(rco, ry, rx, rci, fl, nl)

    # the tutorial's order: AA and WW are read only by AL and WL, not yet attached to BL
    s[AA].compute_at(s[BL], rx)
    s[WW].compute_at(s[BL], rx)
    s[AL].compute_at(s[BL], rci)
    s[WL].compute_at(s[BL], rci)

    for cache in (AA, WW):  # cooperative fetching: every thread of the block copies a part
        _, _, c, last = s[cache].op.axis
        tyc, c = s[cache].split(c, nparts=THREADS)
        txc, last = s[cache].split(last, nparts=THREADS)
        s[cache].reorder(tyc, txc, c, last)
        s[cache].bind(tyc, te.thread_axis("threadIdx.y"))
        s[cache].bind(txc, te.thread_axis("threadIdx.x"))
    return s, A, W, B


@pytest.mark.parametrize("vthreads", [False, True])
def test_gpu_conv2d_placement_order_lowers_with_the_intended_scopes(vthreads):
    s, A, W, B = conv2d_gpu_schedule(vthreads)
    text = str(tf.lower(s, [A, W, B], target="cuda -arch=sm_90"))
    for cache, scope in (("Apad.shared", "shared"), ("W.shared", "shared")):
        assert f"{cache} = allocate" in text and f"scope='{scope}'" in text
    assert "Apad.shared.local = allocate" in text and "B.local = allocate" in text


@pytest.mark.parametrize("vthreads", [False, True])
def test_gpu_conv2d_placement_order_compiles_with_nvcc(tmp_path, vthreads):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    s, A, W, B = conv2d_gpu_schedule(vthreads)
    mod = tf.build(s, [A, W, B], target="cuda -arch=sm_90")
    source = tmp_path / "conv2d.cu"
    source.write_text(mod.get_source("cuda"))
    result = subprocess.run(
        [nvcc, "-arch=sm_90", "--ptx", "-o", str(tmp_path / "conv2d.ptx"), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.cuda
@pytest.mark.parametrize("vthreads", [False, True])
def test_gpu_conv2d_placement_order_runs(vthreads):
    s, A, W, B = conv2d_gpu_schedule(vthreads)
    mod = tf.build(s, [A, W, B], target="cuda")
    dev = tf.cuda(0)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (SIZE, SIZE, CIN, BATCH)).astype("float32")
    w = rng.uniform(-1, 1, (KERNEL, KERNEL, CIN, COUT)).astype("float32")
    out = tf.nd.array(np.full((SIZE, SIZE, COUT, BATCH), np.nan, "float32"), dev)
    mod(tf.nd.array(a, dev), tf.nd.array(w, dev), out)
    np.testing.assert_allclose(out.numpy(), conv2d_reference(a, w), rtol=1e-4, atol=1e-4)


def test_gpu_conv2d_schedule_on_the_cpu_reference_shape():
    # the reference itself, against a plain schedule of the same compute on the CPU
    A, W, Apad, B = conv2d_hwcn()
    s = te.create_schedule(B.op)
    check_against_numpy(s, [A, W], [B], conv2d_reference, rtol=1e-4, atol=1e-4)
