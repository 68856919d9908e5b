"""The c target: C source with vector extensions, compiled by the system cc, checked against NumPy
and against the llvm backend on the same inputs (differential testing)."""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.testing.check import check_against_numpy
from tensorforge.testing.guarded import check_all, guarded_copy, guarded_empty

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def both(s, args, arrays):
    """Run the schedule built for c and for llvm on copies of `arrays`; the c outputs."""
    outs = {}
    for target in ("c", "llvm"):
        copies = [a.copy() for a in arrays]
        tf.build(s, args, target=target)(*copies)
        outs[target] = copies
    for got, want in zip(outs["c"], outs["llvm"]):
        np.testing.assert_array_equal(got, want)
    return outs["c"]


def test_target_c_is_its_own_kind():
    target = tf.Target("c")
    assert target.kind == "c" and target.kind.name == "c" and target.device_kind == "cpu"
    assert (
        str(target).startswith("c -mcpu=") and target.vector_bits == tf.Target("llvm").vector_bits
    )
    assert tf.device("c") == tf.cpu(0)


def test_vectorized_loop_uses_vector_extensions_and_masked_tail_stays_in_bounds():
    n = 37  # 4 full vectors of 8 and a tail of 5
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    mod = tf.build(s, [A, B], target="c")
    source = mod.get_source("c")
    assert "__attribute__((vector_size(32)))" in source and "tf_f32x8" in source
    assert mod.get_source() == source
    asm = mod.get_source("asm")
    assert "main:" in asm and ("%ymm" in asm or "%xmm" in asm)  # vector registers
    for side in ("end", "start"):
        a = guarded_copy(np.random.default_rng(1).random(n, dtype=np.float32), side=side, align=4)
        b = guarded_empty((n,), "float32", side=side, align=4)
        mod(a.array, b.array)
        check_all([a, b])  # no byte written beside B, nothing read past A (a guard page)
        np.testing.assert_allclose(b.array, a.array * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_integer_dtypes_wrap_and_floor_like_numpy(dtype, rng):
    n = 29
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: A[i] * B[i] + A[i], name="C")
    D = te.compute((n,), lambda i: C[i] // B[i] + A[i] % B[i], name="D")
    E = te.compute((n,), lambda i: te.max(D[i], A[i]) - te.min(C[i], B[i]), name="E")
    s = te.create_schedule(E.op)
    for T in (C, D, E):
        _, inner = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(inner)
    info = np.iinfo(dtype)
    low = max(info.min, -100)
    a = rng.integers(low, min(info.max, 100), n).astype(dtype)
    b = rng.integers(1, min(info.max, 100), n).astype(dtype)
    if info.min < 0:
        b[::3] = -b[::3]  # negative divisors: floor division rounds toward -inf
    (e,) = both(s, [A, B, E], [a, b, np.zeros(n, dtype)])[2:]
    with np.errstate(over="ignore"):
        c = a * b + a
        d = c // b + a % b
        np.testing.assert_array_equal(e, np.maximum(d, a) - np.minimum(c, b))


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int64"])
def test_integer_division_in_a_guarded_vector_tail_does_not_trap(dtype):
    # a run-time n: the tail is a guarded vector whose inactive lanes load 0, which each
    # lane's division got (SIGFPE, the process killed) on both backends
    n = te.var("n")
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    D = te.compute((n,), lambda i: A[i] // B[i] + A[i] % B[i], name="D")
    s = te.create_schedule(D.op)
    _, inner = s[D].split(D.op.axis[0], factor=8)
    s[D].vectorize(inner)
    size = 13  # a vector and 5 of 8 lanes
    a = (np.arange(size) * 7 % 50 - (0 if dtype == "uint8" else 25)).astype(dtype)
    b = (np.arange(size) % 5 + 1).astype(dtype)
    (d,) = both(s, [A, B, D], [a, b, np.zeros(size, dtype)])[2:]
    np.testing.assert_array_equal(d, a // b + a % b)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_values_that_overflow_wrap_around(dtype):
    # torch's integers wrap: (a * k) // k is not a once a * k overflows (the simplifier, LLVM's
    # nsw and C's signed overflow each assumed it could not), nor is a * 4 > a a > 0
    info = np.iinfo(dtype)
    k = 3 if dtype == "int32" else 2**40 + 1
    a = np.array([info.max, info.min, info.max // 2, -5, 7, info.min // 2 - 1, 100, 2], dtype)
    n = te.var("n")
    A = te.placeholder((n,), dtype, name="A")
    B = te.compute((n,), lambda i: (A[i] * k) // k + (A[i] * 4 > A[i]).astype(dtype), name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(inner)
    (b,) = both(s, [A, B], [a, np.zeros(8, dtype)])[1:]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, (a * np.array(k, dtype)) // k + (a * 4 > a))


def wrapped_floor(a, b, dtype):
    """Python's a // b and a % b of integer arrays, the quotient wrapped to `dtype` as torch
    wraps it (the minimum // -1 is the minimum)."""
    bits = np.iinfo(dtype).bits
    q = [((x // y) + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1)) for x, y in zip(a, b)]
    return np.array(q, dtype), np.array([x % y for x, y in zip(a, b)], dtype)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("size", [13, None])  # a run-time size (a guarded vector tail), static
def test_integer_minimum_divided_by_minus_one_wraps(dtype, size):
    # x86 idiv of the minimum by -1 overflows and raises SIGFPE (the process killed) on both
    # backends; torch gives the minimum (wrapped) and a remainder of 0
    info = np.iinfo(dtype)
    values = [info.min, info.min, info.min, info.max, -7, 7, 0, info.min, -1, info.min + 1]
    divisors = [-1, 1, -1, -1, -1, 2, -1, 3, -1, -1]
    a = np.array((values * 2)[:13], dtype)
    b = np.array((divisors * 2)[:13], dtype)
    n = te.var("n") if size is None else 13
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    Q = te.compute((n,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((n,), lambda i: A[i] % B[i], name="R")
    M = te.compute((n,), lambda i: A[i] // -1 + A[i] % -1, name="M")  # constant divisor
    s = te.create_schedule([Q.op, R.op, M.op])
    for T in (Q, R, M):
        _, inner = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(inner)
    outs = [np.zeros(13, dtype) for _ in range(3)]
    q, r, m = both(s, [A, B, Q, R, M], [a, b, *outs])[2:]
    want_q, want_r = wrapped_floor(a.tolist(), b.tolist(), dtype)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(m, wrapped_floor(a.tolist(), [-1] * 13, dtype)[0])


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-6), ("float64", 1e-12), ("float16", 2e-3)])
@pytest.mark.parametrize("lanes", [1, 8])
def test_math_intrinsics_match_numpy(dtype, rtol, lanes):
    n = 21
    A = te.placeholder((n,), dtype, name="A")
    funcs = {
        "exp": (te.exp, np.exp),
        "log": (lambda x: te.log(te.abs(x) + 0.5), lambda x: np.log(np.abs(x) + 0.5)),
        "log2": (lambda x: te.log2(te.abs(x) + 0.5), lambda x: np.log2(np.abs(x) + 0.5)),
        "sqrt": (lambda x: te.sqrt(te.abs(x)), lambda x: np.sqrt(np.abs(x))),
        "rsqrt": (lambda x: te.rsqrt(te.abs(x) + 1.0), lambda x: 1 / np.sqrt(np.abs(x) + 1)),
        "tanh": (te.tanh, np.tanh),
        "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        "erf": (te.erf, None),
        "floor": (te.floor, np.floor),
        "ceil": (te.ceil, np.ceil),
        "round": (te.round, np.round),  # half to even
        "pow": (lambda x: te.power(te.abs(x), 1.5), lambda x: np.abs(x) ** 1.5),
        "log1p": (lambda x: te.log1p(te.abs(x)), lambda x: np.log1p(np.abs(x))),
        "expm1": (te.expm1, np.expm1),
        "atan2": (lambda x: te.atan2(x, x * 0.5 - 1.0), lambda x: np.arctan2(x, x * 0.5 - 1)),
        "hypot": (lambda x: te.hypot(x, x * 0.5 - 1.0), lambda x: np.hypot(x, x * 0.5 - 1)),
    }
    outs = [te.compute((n,), _apply(f, A), name=name) for name, (f, _) in funcs.items()]
    s = te.create_schedule([o.op for o in outs])
    if lanes > 1:
        for o in outs:
            _, inner = s[o].split(o.op.axis[0], factor=lanes)
            s[o].vectorize(inner)
    mod = tf.build(s, [A, *outs], target="c")
    x = np.linspace(-3, 3, n).astype(dtype)
    x[n // 2] = 2.5  # a tie for round
    arrays = [np.zeros(n, dtype) for _ in outs]
    mod(x, *arrays)
    for (name, (_, reference)), got in zip(funcs.items(), arrays):
        if reference is None:
            from math import erf

            reference = np.vectorize(erf)
        want = reference(x.astype("float64")).astype(dtype)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=name)


def _apply(f, A):
    return lambda i: f(A[i])


def test_float_min_max_propagate_nan_and_bool_buffers():
    n = 11
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    M = te.compute((n,), lambda i: te.max(A[i], B[i]), name="M")
    N = te.compute((n,), lambda i: te.min(A[i], B[i]), name="N")
    P = te.compute((n,), lambda i: A[i] < B[i], name="P")  # a bool buffer
    Q = te.compute((n,), lambda i: te.if_then_else(P[i], A[i], -B[i]), name="Q")
    s = te.create_schedule([M.op, N.op, Q.op])
    for T in (M, N, P, Q):
        _, inner = s[T].split(T.op.axis[0], factor=4)
        s[T].vectorize(inner)
    a = np.arange(n, dtype="float32") - 5
    b = a[::-1].copy()
    a[2], b[7] = np.nan, np.nan
    m, nn, q = (np.zeros(n, "float32") for _ in range(3))
    tf.build(s, [A, B, M, N, Q], target="c")(a, b, m, nn, q)
    np.testing.assert_array_equal(m, np.maximum(a, b))
    np.testing.assert_array_equal(nn, np.minimum(a, b))
    np.testing.assert_array_equal(q, np.where(a < b, a, -b))


def test_parallel_loops_run_on_openmp_threads(monkeypatch, rng):
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    n, m = 13, 50
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    T = te.compute((n,), lambda i: B[i] + 1.0, name="T")
    s = te.create_schedule(T.op)
    s[T].parallel(T.op.axis[0])
    s[B].compute_at(s[T], T.op.axis[0])
    mod = tf.build(s, [A, T], target="c")
    assert "#pragma omp parallel" in mod.get_source()
    assert mod["main"].source.num_threads_symbol == "__tf_num_threads"
    check_against_numpy(s, [A], [T], lambda a: (a * a).sum(axis=1) + 1, target="c", rtol=1e-5)


def test_arguments_are_checked_as_for_llvm():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    mod = tf.build(te.create_schedule(B.op), [A, B], target="c")
    with pytest.raises(tf.ArgumentError, match="B"):
        mod(np.zeros(4, "float32"), np.zeros(5, "float32"))
    with pytest.raises(tf.ArgumentError, match="float32"):
        mod(np.zeros(4, "float64"), np.zeros(4, "float32"))
    timer = mod.time_evaluator(mod.entry_name, tf.cpu(0), number=2, repeat=2)
    assert len(timer(np.zeros(4, "float32"), np.zeros(4, "float32")).results) == 2


def test_names_c_would_misread_stay_apart():
    # tensors and axes named like C keywords, library functions and macros
    A = te.placeholder((6,), name="int")
    B = te.compute((6,), lambda exp: te.exp(A[exp]) + 1.0, name="NAN")
    C = te.compute((6,), lambda l: B[l] * 2.0, name="M_PI")  # noqa: E741
    s = te.create_schedule(C.op)
    mod = tf.build(s, [A, C], target="c", name="main")
    a = np.linspace(0, 1, 6).astype("float32")
    c = np.zeros(6, "float32")
    mod(a, c)
    np.testing.assert_allclose(c, (np.exp(a) + 1) * 2, rtol=1e-6)


def test_export_and_load_in_another_process(tmp_path):
    n = 100
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: te.sqrt(A[i]) * 3.0, name="B")
    s = te.create_schedule(B.op)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    s[B].parallel(s[B].leaf_iter_vars[0])
    path = tmp_path / "kernel.tflib"
    tf.build(s, [A, B], target="c", name="scaled_sqrt").export_library(path)
    script = textwrap.dedent(
        f"""
        import numpy as np
        import tensorforge.runtime.c_exec as c_exec
        c_exec.compile_library = None  # loading must not compile
        import tensorforge as tf
        mod = tf.runtime.load_module({str(path)!r})
        assert mod.type_key == "c" and mod.entry_name == "scaled_sqrt"
        assert "vector_size" in mod.get_source("c")
        a = np.arange({n}, dtype=np.float32); b = np.zeros({n}, np.float32)
        mod(a, b)
        assert np.allclose(b, np.sqrt(a) * 3.0)
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_disk_cache_hit_compiles_nothing(monkeypatch, tmp_path):
    from tensorforge.runtime import c_exec, disk_cache
    from tensorforge.runtime.cache import EXECUTABLES

    monkeypatch.setenv("TENSORFORGE_CACHE", "1")
    monkeypatch.setenv("TENSORFORGE_CACHE_DIR", str(tmp_path))
    A = te.placeholder((9,), name="A")
    B = te.compute((9,), lambda i: A[i] - 4.0, name="B")
    s = te.create_schedule(B.op)
    EXECUTABLES.clear()
    tf.build(s, [A, B], target="c")
    disk_cache.flush()
    EXECUTABLES.clear()
    monkeypatch.setattr(c_exec, "compile_library", None)  # a hit must not compile
    mod = tf.build(s, [A, B], target="c")
    a, b = np.ones(9, "float32"), np.zeros(9, "float32")
    mod(a, b)
    np.testing.assert_array_equal(b, a - 4)
    EXECUTABLES.clear()


def test_a_gpu_schedule_is_refused_with_the_loop_named():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    with pytest.raises(tf.BuildError, match="bound to threadIdx.x"):
        tf.build(s, [A, B], target="c")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_dtypes_and_casts_match_llvm(dtype, rng):
    n = 19
    A = te.placeholder((n,), dtype, name="A")
    B = te.placeholder((n,), dtype, name="B")
    C = te.compute((n,), lambda i: (A[i] * B[i] - A[i] / B[i]) // 1.5 + A[i] % B[i], name="C")
    D = te.compute((n,), lambda i: (C[i].astype("int32") + 3).astype(dtype) * 0.5, name="D")
    s = te.create_schedule(D.op)
    for T in (C, D):
        _, inner = s[T].split(T.op.axis[0], factor=8)
        s[T].vectorize(inner)
    a = rng.uniform(-4, 4, n).astype(dtype)
    b = (rng.uniform(0.5, 2, n) * rng.choice([-1, 1], n)).astype(dtype)
    (d,) = both(s, [A, B, D], [a, b, np.zeros(n, dtype)])[2:]
    x, y = a.astype("float64"), b.astype("float64")
    c = (x * y - x / y) // 1.5 + np.mod(x, y)
    want = (np.trunc(c) + 3) * 0.5
    close = np.isclose(d, want, rtol=1e-2 if dtype == "float16" else 1e-5)
    # float16 rounding may move a value across an integer before the cast
    assert close.all() if dtype != "float16" else close.mean() > 0.8


def test_unroll_counts_on_innermost_loops_only(rng):
    # fuzz seed 13 #82: a 7x7 tile over symbolic extents with both outer loops `unroll`: each
    # got a count of 4 around the tile LLVM unrolls itself (4 x 4 x 49 copies, 5 s to build)
    r, q = te.var("r"), te.var("q")
    X = te.placeholder((r, q), name="X")
    Y = te.compute((r, q), lambda i, j: X[i, (j * 5 + 3) % q] + 1.0, name="Y")
    s = te.create_schedule(Y.op)
    io, jo, _, _ = s[Y].tile(Y.op.axis[0], Y.op.axis[1], 7, 7)
    s[Y].unroll(io)
    s[Y].unroll(jo)
    x = rng.random((31, 4), dtype=np.float32)
    (y,) = both(s, [X, Y], [x, np.zeros((31, 4), np.float32)])[1:]
    np.testing.assert_allclose(y, x[:, (np.arange(4) * 5 + 3) % 4] + 1, rtol=1e-6)
    assert "#pragma GCC unroll" not in _generated(s, [X, Y], "c")
    assert "llvm.loop.unroll.count" not in _generated(s, [X, Y], "llvm")
    # an innermost one keeps its bounded count
    s = te.create_schedule(Y.op)
    s[Y].unroll(Y.op.axis[1])
    assert "#pragma GCC unroll 4" in _generated(s, [X, Y], "c")
    assert 'llvm.loop.unroll.count", i32 4' in _generated(s, [X, Y], "llvm")


def _generated(s, args, target) -> str:
    """The source codegen prints for `target` (LLVM's before its optimizer)."""
    from tensorforge.codegen.base import codegen_for

    target = tf.Target(target)
    return codegen_for(target.kind).generate(tf.lower(s, args, target=target), target).text


def test_bfloat16_computes_in_float32_as_on_llvm(rng):
    # the pipeline's legalize_bfloat16 leaves conversions only: C does them with bit operations
    from tensorforge.te.dtype import from_bfloat16, to_bfloat16

    def bf16(x):
        return from_bfloat16(to_bfloat16(x))

    n = 29  # 3 vectors of 8 and a tail of 5
    A = te.placeholder((n,), "bfloat16", name="A")
    B = te.compute((n,), lambda i: A[i] * 3.0 + te.exp(A[i]), name="B")
    C = te.compute((n,), lambda i: B[i].astype("float32") * 2.0, name="C")
    for vectorize in (False, True):
        s = te.create_schedule(C.op)
        if vectorize:
            for T in (B, C):
                s[T].vectorize(s[T].split(T.op.axis[0], factor=8)[1])
        a = to_bfloat16(rng.standard_normal(n))
        a[3] = 0x7FC0  # a NaN stays a NaN
        b, c = both(s, [A, B, C], [a, np.zeros(n, np.uint16), np.zeros(n, np.float32)])[1:]
        x = from_bfloat16(a)
        want = bf16(bf16(x * 3) + bf16(np.exp(x)))  # rounded after each operation
        np.testing.assert_allclose(from_bfloat16(b), want, rtol=2**-7)
        np.testing.assert_array_equal(c, from_bfloat16(b) * 2)
