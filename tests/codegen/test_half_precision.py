"""float16 and bfloat16 end to end: dtype rules, constant folding, LLVM (against NumPy) and
CUDA (nvcc compiles the kernels here; `@pytest.mark.cuda` runs them on the GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.arith.const_fold import make_const
from tensorforge.te import dtype as dt
from tensorforge.te.dtype import from_bfloat16, to_bfloat16
from tests.codegen.test_cuda_codegen import NVCC, nvcc_ptx


def as_storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` in the storage of `dtype` (bfloat16: uint16 bits)."""
    return to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def as_float(x: np.ndarray, dtype: str) -> np.ndarray:
    return from_bfloat16(x) if dtype == "bfloat16" else x.astype("float32")


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded to `dtype`'s precision."""
    return as_float(as_storage(np.asarray(x, "float32"), dtype), dtype)


def test_dtype_rules():
    assert dt.check_dtype("bfloat16") == "bfloat16" and dt.is_float("bfloat16x8")
    assert dt.promote("float16", "bfloat16") == "float32"
    assert dt.promote("bfloat16", "float32") == "float32"
    assert dt.promote("bfloat16", "int8") == "bfloat16"
    assert dt.numpy_dtype("bfloat16") == np.uint16 and dt.bits_of("bfloat16") == 16
    x = te.placeholder((4,), "bfloat16", name="x")
    assert (x[0] + 1.5).dtype == "bfloat16" and (x[0] * x[1].astype("float16")).dtype == "float32"


def test_bfloat16_bits_round_to_nearest_even():
    # 1 + 2^-8 is halfway between two bfloat16s: to even (1.0); 1 + 3 * 2^-8 rounds up
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, np.nan], "float32")
    back = from_bfloat16(to_bfloat16(x))
    np.testing.assert_array_equal(back[:5], [1.0, 1.0, 1 + 2**-6, -2.5, np.inf])
    assert np.isnan(back[5])
    rng = np.random.default_rng(0)
    y = rng.standard_normal(1000).astype("float32")
    assert np.all(np.abs(from_bfloat16(to_bfloat16(y)) - y) <= np.abs(y) * 2**-8)


def test_constants_fold_in_their_precision():
    assert make_const(0.1, "float16").value == float(np.float16(0.1))
    assert make_const(1 + 2**-10, "bfloat16").value == 1.0
    x = te.placeholder((2,), "bfloat16", name="x")
    y = te.compute((2,), lambda i: x[i] * (te.const(1.0, "bfloat16") + 2**-9), name="y")
    # 1 + 2^-9 is 1.0 in bfloat16, and x * 1.0 is x
    assert str(tf.lower(te.create_schedule(y.op), [x, y])).endswith("y[i] = x[i]")


def half_gemm(m, n, k, dtype, out_dtype="float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute(
        (m, n),
        lambda i, j: te.sum(A[i, r].astype("float32") * B[r, j].astype("float32"), axis=r),
        name="C",
    )
    if out_dtype == "float32":
        return A, B, C, C
    D = te.compute((m, n), lambda i, j: C[i, j].astype(out_dtype), name="D")
    return A, B, C, D


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(37, 29, 41), (1, 1, 1), (16, 64, 128)])
def test_cpu_gemm_accumulates_in_float32(dtype, shape, rng):
    m, n, k = shape
    A, B, C, D = half_gemm(m, n, k, dtype, out_dtype=dtype)
    s = te.create_schedule(D.op)
    jo, ji = s[D].split(D.op.axis[1], factor=8)
    s[D].vectorize(ji)
    f = tf.build(s, [A, B, D])
    a = as_storage(rng.uniform(-1, 1, (m, k)), dtype)
    b = as_storage(rng.uniform(-1, 1, (k, n)), dtype)
    d = tf.nd.empty((m, n), dt.numpy_dtype(dtype))
    f(tf.nd.array(a), tf.nd.array(b), d)
    ref = as_float(a, dtype).astype("float64") @ as_float(b, dtype).astype("float64")
    tol = 2**-10 if dtype == "float16" else 2**-7
    np.testing.assert_allclose(as_float(d.numpy(), dtype), ref, rtol=tol, atol=tol * np.sqrt(k))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cpu_elementwise_rounds_each_operation(dtype, rng):
    n = 67
    x = te.placeholder((n,), dtype, name="x")
    y = te.compute((n,), lambda i: te.exp(x[i]) * x[i] + te.const(0.75, dtype), name="y")
    s = te.create_schedule(y.op)
    o, v = s[y].split(y.op.axis[0], factor=16)
    s[y].vectorize(v)
    f = tf.build(s, [x, y])
    xs = as_storage(rng.uniform(-2, 2, n), dtype)
    out = tf.nd.empty((n,), dt.numpy_dtype(dtype))
    f(tf.nd.array(xs), out)
    xf = as_float(xs, dtype)
    ref = rounded(rounded(rounded(np.exp(xf), dtype) * xf, dtype) + 0.75, dtype)
    ulp = 2**-10 if dtype == "float16" else 2**-7
    np.testing.assert_allclose(as_float(out.numpy(), dtype), ref, rtol=ulp, atol=ulp)


def test_bfloat16_argument_is_its_uint16_bits():
    x = te.placeholder((4,), "bfloat16", name="x")
    y = te.compute((4,), lambda i: x[i] * 2, name="y")
    f = tf.build(te.create_schedule(y.op), [x, y])
    out = tf.nd.empty((4,), "uint16")
    f(tf.nd.array(to_bfloat16(np.arange(4, dtype="float32"))), out)
    np.testing.assert_array_equal(from_bfloat16(out.numpy()), [0, 2, 4, 6])
    with pytest.raises(tf.ArgumentError, match="uint16"):
        f(tf.nd.array(np.zeros(4, "float32")), out)


# -- CUDA -------------------------------------------------------------------------------------


def cuda_elementwise(dtype, n=1024, vector=8):
    x = te.placeholder((n,), dtype, name="x")
    w = te.placeholder((n,), dtype, name="w")
    y = te.compute((n,), lambda i: te.tanh(x[i]) * w[i] + te.const(0.5, dtype), name="y")
    s = te.create_schedule(y.op)
    o, v = s[y].split(y.op.axis[0], factor=vector)
    bx, tx = s[y].split(o, factor=32)
    s[y].bind(bx, te.thread_axis("blockIdx.x"))
    s[y].bind(tx, te.thread_axis("threadIdx.x"))
    s[y].vectorize(v)
    return s, [x, w, y]


@pytest.mark.parametrize("dtype, pair", [("float16", "half2"), ("bfloat16", "__nv_bfloat162")])
def test_cuda_half_vectors_move_16_bytes(dtype, pair, tmp_path):
    s, args = cuda_elementwise(dtype)
    source = tf.build(s, args, target="cuda").get_source("cuda")
    assert f"{pair} x_v[4];" in source and "reinterpret_cast<uint4*>" in source
    if dtype == "bfloat16":
        assert "#include <cuda_bf16.h>" in source and "__nv_bfloat16* __restrict__ y" in source
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    assert ".entry" in nvcc_ptx(source, tmp_path)


def cuda_half_gemm(m, n, k, dtype, tile=16):
    """A shared-memory GEMM on 16-bit inputs with a float32 accumulator and a 16-bit result."""
    A, B, C, D = half_gemm(m, n, k, dtype, out_dtype=dtype)
    s = te.create_schedule(D.op)
    AS = s.cache_read(A, "shared", [C])
    BS = s.cache_read(B, "shared", [C])
    s[C].set_scope("local")
    by, bx, ty, tx = s[D].tile(D.op.axis[0], D.op.axis[1], tile, tile)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y")):
        s[D].bind(axis, te.thread_axis(tag))
    s[D].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].compute_at(s[D], tx)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=tile)
    for stage in (AS, BS):
        s[stage].compute_at(s[C], ko)
        y, x = s[stage].op.axis
        s[stage].bind(y, te.thread_axis("threadIdx.y"))
        s[stage].bind(x, te.thread_axis("threadIdx.x"))
    return s, [A, B, D]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_half_gemm_compiles(dtype, tmp_path):
    s, args = cuda_half_gemm(128, 96, 64, dtype)
    source = tf.build(s, args, target="cuda").get_source("cuda")
    assert "float C[1];" in source and "__float2half(C[0])" in source.replace("bfloat16", "half")
    if NVCC is None:
        pytest.skip("nvcc is not on PATH")
    assert ".entry" in nvcc_ptx(source, tmp_path)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_half_elementwise_matches_numpy(dtype, rng):
    s, args = cuda_elementwise(dtype)
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    x = as_storage(rng.uniform(-2, 2, 1024), dtype)
    w = as_storage(rng.uniform(-2, 2, 1024), dtype)
    out = tf.nd.empty((1024,), dt.numpy_dtype(dtype), dev)
    mod(tf.nd.array(x, dev), tf.nd.array(w, dev), out)
    xf, wf = as_float(x, dtype), as_float(w, dtype)
    ref = np.tanh(xf) * wf + 0.5
    tol = 2**-8 if dtype == "float16" else 2**-5
    np.testing.assert_allclose(as_float(out.numpy(), dtype), ref, rtol=tol, atol=tol)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(128, 96, 64), (37, 29, 41)])
def test_cuda_half_gemm_matches_numpy(dtype, shape, rng):
    m, n, k = shape
    s, args = cuda_half_gemm(m, n, k, dtype)
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    a = as_storage(rng.uniform(-1, 1, (m, k)), dtype)
    b = as_storage(rng.uniform(-1, 1, (k, n)), dtype)
    d = tf.nd.empty((m, n), dt.numpy_dtype(dtype), dev)
    mod(tf.nd.array(a, dev), tf.nd.array(b, dev), d)
    ref = as_float(a, dtype).astype("float64") @ as_float(b, dtype).astype("float64")
    tol = 2**-10 if dtype == "float16" else 2**-7
    np.testing.assert_allclose(as_float(d.numpy(), dtype), ref, rtol=tol, atol=tol * np.sqrt(k))
