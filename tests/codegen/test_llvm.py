"""The llvm backend on hand-built lowered PrimFuncs, JIT-compiled and checked against numpy.

Math intrinsics (exp, log, tanh, ...) and their accuracy are in test_llvm_math.py."""

import dataclasses

import numpy as np
import pytest

from tensorforge.codegen import CODEGENS
from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Broadcast, Buffer, BufferLoad, Ramp, VectorReduce
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    BufferStore,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Seq,
    Sync,
)
from tensorforge.runtime.llvm_exec import LLVMExecutable
from tensorforge.target import Target
from tensorforge.te.expr import (
    LT,
    Add,
    Call,
    Cast,
    Const,
    Div,
    FloorDiv,
    FloorMod,
    Let,
    Max,
    Min,
    Mul,
    Select,
    Sub,
    Var,
)

TARGET = Target("llvm")


# -- helpers --------------------------------------------------------------------------------------
def c(value, dtype="int32"):
    return Const(value, dtype)


def ramp(base, lanes, stride=1):
    return Ramp(base, c(stride), lanes)


def load(buffer, index, predicate=None):
    return BufferLoad(buffer, (index,), predicate)


def store(buffer, index, value, predicate=None):
    return BufferStore(buffer, (index,), value, predicate)


def loop(var, extent, body, kind=LoopKind.SERIAL, start=0):
    extent = extent if not isinstance(extent, int) else c(extent)
    return For(var, c(start), extent, body, kind)


def aligned(array):
    """A copy of `array` in 64-byte aligned memory, as the CPU contract requires."""
    array = np.asarray(array)
    raw = np.empty(array.nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    out = raw[offset : offset + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def compile_func(func):
    source = LLVMCodegen().generate(func, TARGET)
    return source, LLVMExecutable(source, TARGET)


def run(func, *args):
    """Compile `func` and call it; numpy arguments pass by address (and are updated in place)."""
    _, exe = compile_func(func)
    exe.call([a.ctypes.data if isinstance(a, np.ndarray) else a for a in args])
    return exe


def unary_kernel(name, op, lanes, dtype="float32"):
    """B[i] = op(A[i]) for i < n, n a multiple of `lanes`, `lanes` at a time."""
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), dtype), Buffer("B", (n,), dtype)
    if lanes == 1:
        body = loop(i, n, store(B, i, op(load(A, i))))
    else:
        index = ramp(i * c(lanes), lanes)
        body = loop(i, FloorDiv(n, c(lanes)), store(B, index, op(load(A, index))))
    return PrimFunc(name, (A, B, n), body)


# -- basics ---------------------------------------------------------------------------------------
def test_registry_has_llvm():
    assert isinstance(CODEGENS["llvm"], LLVMCodegen)


def test_elementwise_add_vector_body_and_scalar_tail(rng):
    n, i, j = Var("n"), Var("i"), Var("j")
    A, B, C = (Buffer(name, (n,), "float32") for name in "ABC")
    vec = loop(
        i,
        FloorDiv(n, c(8)),
        store(C, ramp(i * c(8), 8), Add(load(A, ramp(i * c(8), 8)), load(B, ramp(i * c(8), 8)))),
    )
    tail_start = Mul(FloorDiv(n, c(8)), c(8))
    tail = For(j, tail_start, Sub(n, tail_start), store(C, j, Add(load(A, j), load(B, j))))
    func = PrimFunc("vadd", (A, B, C, n), Seq((vec, tail)))
    size = 1003
    a, b = (
        aligned(rng.standard_normal(size, np.float32)),
        aligned(rng.standard_normal(size, np.float32)),
    )
    out = aligned(np.zeros(size, np.float32))
    exe = run(func, a, b, out, size)
    np.testing.assert_array_equal(out, a + b)
    ll = exe.get_source("ll")
    assert "<8 x float>" in ll and "define void @vadd" in ll
    assert "vaddps" in exe.get_source("asm") or "addps" in exe.get_source("asm")


def test_params_mark_symbolic_sizes():
    n, m, alpha = Var("n"), Var("m"), Var("alpha", "float32")
    A = Buffer("A", (n, c(4)), "float32")
    B = Buffer("B", (n,), "int8")
    i = Var("i")
    func = PrimFunc("params", (A, B, n, m, alpha), loop(i, m, store(B, i, c(1, "int8"))))
    source = LLVMCodegen().generate(func, TARGET)
    kinds = [(p.name, p.kind, p.dtype, p.shape, p.bound_from_shape) for p in source.params]
    assert kinds == [
        ("A", "buffer", "float32", ("n", 4), False),
        ("B", "buffer", "int8", ("n",), False),
        ("n", "scalar", "int32", (), True),
        ("m", "scalar", "int32", (), False),
        ("alpha", "scalar", "float32", (), False),
    ]
    assert source.target == "llvm" and source.entry == "params"
    signature = (
        'define void @"params"(ptr noalias align 4 %"A", ptr noalias align 1 %"B", '
        'i32 %"n", i32 %"m", float %"alpha")'
    )
    assert signature in source.text


def test_reduction_loop_row_sums(rng):
    rows, cols = 37, 129
    A, S = Buffer("A", (c(rows), c(cols)), "float32"), Buffer("S", (c(rows),), "float32")
    i, k = Var("i"), Var("k")
    body = loop(
        i,
        rows,
        Seq(
            (
                store(S, i, c(0.0, "float32")),
                loop(k, cols, store(S, i, Add(load(S, i), load(A, Add(Mul(i, c(cols)), k))))),
            )
        ),
    )
    a = aligned(rng.standard_normal((rows, cols), np.float32))
    s = aligned(np.zeros(rows, np.float32))
    run(PrimFunc("rowsum", (A, S), body), a, s)
    np.testing.assert_allclose(s, a.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_scalar_param_scales(rng):
    n, i, alpha = Var("n"), Var("i"), Var("alpha", "float32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    func = PrimFunc(
        "axpy", (A, B, alpha, n), loop(i, n, store(B, i, Add(Mul(alpha, load(A, i)), load(B, i))))
    )
    a, b = (
        aligned(rng.standard_normal(100, np.float32)),
        aligned(rng.standard_normal(100, np.float32)),
    )
    expected = np.float32(2.5) * a + b
    run(func, a, b, 2.5, 100)
    np.testing.assert_allclose(b, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_floor_div_mod_python_semantics(dtype):
    values = np.arange(-50, 51)
    divisors = np.array([d for d in range(-7, 8) if d != 0])
    x, d = np.repeat(values, divisors.size), np.tile(divisors, values.size)
    n, i = Var("n"), Var("i")
    X, D = Buffer("X", (n,), dtype), Buffer("D", (n,), dtype)
    Q, R, Q3, R3, Qm = (Buffer(name, (n,), dtype) for name in ("Q", "R", "Q3", "R3", "Qm"))
    xi, di = load(X, i), load(D, i)
    body = loop(
        i,
        n,
        Seq(
            (
                store(Q, i, FloorDiv(xi, di)),
                store(R, i, FloorMod(xi, di)),
                store(Q3, i, FloorDiv(xi, c(3, dtype))),  # positive constant divisor
                store(R3, i, FloorMod(xi, c(3, dtype))),
                store(Qm, i, FloorDiv(xi, c(-4, dtype))),  # negative constant divisor
            )
        ),
    )
    arrays = [aligned(x.astype(dtype)), aligned(d.astype(dtype))] + [
        aligned(np.zeros(x.size, dtype)) for _ in range(5)
    ]
    run(PrimFunc("floordiv", (X, D, Q, R, Q3, R3, Qm, n), body), *arrays, x.size)
    q, r, q3, r3, qm = arrays[2:]
    np.testing.assert_array_equal(q, x // d)
    np.testing.assert_array_equal(r, x % d)
    np.testing.assert_array_equal(q3, x // 3)
    np.testing.assert_array_equal(r3, x % 3)
    np.testing.assert_array_equal(qm, x // -4)


def test_floor_div_mod_vectors_and_floats(rng):
    x = aligned(np.arange(-32, 32, dtype=np.int32))
    q, r = aligned(np.zeros(64, np.int32)), aligned(np.zeros(64, np.int32))
    X, Q, R = (Buffer(name, (c(64),), "int32") for name in "XQR")
    i = Var("i")
    v = load(X, ramp(i * c(8), 8))
    body = loop(
        i,
        8,
        Seq(
            (
                store(Q, ramp(i * c(8), 8), FloorDiv(v, Broadcast(c(5), 8))),
                store(R, ramp(i * c(8), 8), FloorMod(v, Broadcast(c(5), 8))),
            )
        ),
    )
    run(PrimFunc("vfloordiv", (X, Q, R), body), x, q, r)
    np.testing.assert_array_equal(q, x // 5)
    np.testing.assert_array_equal(r, x % 5)

    F, G, H = (Buffer(name, (c(64),), "float32") for name in "FGH")
    f = aligned((rng.standard_normal(64) * 10).astype(np.float32))
    g, h = aligned(np.zeros(64, np.float32)), aligned(np.zeros(64, np.float32))
    body = loop(
        i,
        64,
        Seq(
            (
                store(G, i, FloorDiv(load(F, i), c(-3.0, "float32"))),
                store(H, i, FloorMod(load(F, i), c(3.0, "float32"))),
            )
        ),
    )
    run(PrimFunc("ffloordiv", (F, G, H), body), f, g, h)
    np.testing.assert_array_equal(g, np.floor_divide(f, np.float32(-3.0)))
    np.testing.assert_allclose(h, np.mod(f, np.float32(3.0)), atol=1e-5)


def test_select_min_max_and_compare(rng):
    n, i = Var("n"), Var("i")
    A, B, C = (Buffer(name, (n,), "float32") for name in "ABC")
    a, b = (
        aligned(rng.standard_normal(64, np.float32)),
        aligned(rng.standard_normal(64, np.float32)),
    )
    out = aligned(np.zeros(64, np.float32))
    ai, bi = load(A, i), load(B, i)
    value = Select(
        LT(ai, bi), Sub(bi, ai), Add(Max(ai, c(0.0, "float32")), Min(bi, c(0.0, "float32")))
    )
    run(PrimFunc("sel", (A, B, C, n), loop(i, n, store(C, i, value))), a, b, out, 64)
    np.testing.assert_allclose(
        out, np.where(a < b, b - a, np.maximum(a, 0) + np.minimum(b, 0)), rtol=1e-6
    )


def test_vector_select_and_let(rng):
    A, B = Buffer("A", (c(64),), "int32"), Buffer("B", (c(64),), "int32")
    i, t = Var("i"), Var("t", "int32x8")
    v = load(A, ramp(i * c(8), 8))
    value = Let(
        t,
        Mul(v, Broadcast(c(3), 8)),
        Select(LT(t, Broadcast(c(0), 8)), Sub(Broadcast(c(0), 8), t), t),
    )
    a, b = aligned(rng.integers(-100, 100, 64).astype(np.int32)), aligned(np.zeros(64, np.int32))
    run(PrimFunc("vsel", (A, B), loop(i, 8, store(B, ramp(i * c(8), 8), value))), a, b)
    np.testing.assert_array_equal(b, np.abs(3 * a))


def test_casts(rng):
    n, i = Var("n"), Var("i")
    F = Buffer("F", (n,), "float32")
    I = Buffer("I", (n,), "int32")
    I8 = Buffer("I8", (n,), "int8")
    U8 = Buffer("U8", (n,), "uint8")
    D = Buffer("D", (n,), "float64")
    Bo = Buffer("Bo", (n,), "bool")
    I64 = Buffer("I64", (n,), "int64")
    f = aligned((rng.standard_normal(64) * 100).astype(np.float32))
    u8 = aligned(rng.integers(0, 256, 64).astype(np.uint8))
    outs = {"I": np.int32, "I8": np.int8, "D": np.float64, "Bo": np.bool_, "I64": np.int64}
    arrays = {k: aligned(np.zeros(64, t)) for k, t in outs.items()}
    fi = load(F, i)
    body = loop(
        i,
        n,
        Seq(
            (
                store(I, i, Cast("int32", fi)),  # truncation toward zero
                store(I8, i, Cast("int8", Cast("int32", fi))),  # wraps like numpy's astype
                store(D, i, Add(Cast("float64", fi), Cast("float64", load(U8, i)))),
                store(Bo, i, LT(fi, c(0.0, "float32"))),
                store(I64, i, Add(Cast("int64", load(U8, i)), Cast("int64", load(Bo, i)))),
            )
        ),
    )
    func = PrimFunc("casts", (F, U8, I, I8, D, Bo, I64, n), body)
    run(func, f, u8, arrays["I"], arrays["I8"], arrays["D"], arrays["Bo"], arrays["I64"], 64)
    np.testing.assert_array_equal(arrays["I"], f.astype(np.int32))
    np.testing.assert_array_equal(arrays["I8"], f.astype(np.int32).astype(np.int8))
    np.testing.assert_array_equal(arrays["D"], f.astype(np.float64) + u8)
    np.testing.assert_array_equal(arrays["Bo"], f < 0)
    np.testing.assert_array_equal(arrays["I64"], u8.astype(np.int64) + (f < 0))


def test_vector_casts(rng):
    A, B = Buffer("A", (c(32),), "int32"), Buffer("B", (c(32),), "float32")
    i = Var("i")
    idx = ramp(i * c(8), 8)
    value = Mul(Cast("float32x8", load(A, idx)), Broadcast(c(0.5, "float32"), 8))
    a, b = (
        aligned(rng.integers(-1000, 1000, 32).astype(np.int32)),
        aligned(np.zeros(32, np.float32)),
    )
    run(PrimFunc("vcast", (A, B), loop(i, 4, store(B, idx, value))), a, b)
    np.testing.assert_array_equal(b, a.astype(np.float32) * 0.5)


def test_ramp_as_value_and_broadcast_of_var():
    B = Buffer("B", (c(64),), "int32")
    i, s = Var("i"), Var("s")
    value = Add(Ramp(Mul(i, c(8)), c(1), 8), Broadcast(s, 8))  # the indices themselves, plus s
    b = aligned(np.zeros(64, np.int32))
    run(PrimFunc("iota", (B, s), loop(i, 8, store(B, ramp(i * c(8), 8), value))), b, 100)
    np.testing.assert_array_equal(b, np.arange(64) + 100)


# -- vector memory --------------------------------------------------------------------------------
def test_masked_vector_load_and_store(rng):
    # B[i*8 + l] = A[i*8 + l] * 2 for the lanes where i*8 + l < n; n = 21 is not a multiple of 8
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = ramp(i * c(8), 8)
    mask = LT(idx, Broadcast(n, 8))
    body = loop(
        i,
        FloorDiv(Add(n, c(7)), c(8)),
        store(B, idx, Mul(load(A, idx, mask), Broadcast(c(2.0, "float32"), 8)), mask),
    )
    size = 21
    a = aligned(rng.standard_normal(24).astype(np.float32))
    b = aligned(np.full(24, -7.0, np.float32))
    exe = run(PrimFunc("masked", (A, B, n), body), a, b, size)
    np.testing.assert_array_equal(b[:size], a[:size] * 2)
    np.testing.assert_array_equal(b[size:], -7.0)  # lanes past n untouched
    assert "llvm.masked" in LLVMCodegen().generate(PrimFunc("masked", (A, B, n), body), TARGET).text
    assert exe is not None


def test_masked_scalar_store_and_load():
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "int32"), Buffer("B", (n,), "int32")
    keep = LT(i, c(5))
    body = loop(i, n, store(B, i, Add(load(A, i, keep), c(1)), keep))
    a, b = aligned(np.arange(10, dtype=np.int32)), aligned(np.full(10, -1, np.int32))
    run(PrimFunc("mscalar", (A, B, n), body), a, b, 10)
    np.testing.assert_array_equal(b, [1, 2, 3, 4, 5, -1, -1, -1, -1, -1])


def test_gather_with_stride_2_and_scatter(rng):
    # B[i*8 + l] = A[(i*8 + l) * 2]: a strided gather; C[(i*8+l)*2] = B[...]: a scatter
    A, C = Buffer("A", (c(128),), "float32"), Buffer("C", (c(128),), "float32")
    B = Buffer("B", (c(64),), "float32")
    i = Var("i")
    strided = ramp(i * c(16), 8, stride=2)
    body = loop(
        i,
        8,
        Seq(
            (
                store(B, ramp(i * c(8), 8), load(A, strided)),
                store(C, strided, load(B, ramp(i * c(8), 8))),
            )
        ),
    )
    a = aligned(rng.standard_normal(128).astype(np.float32))
    b, cc = aligned(np.zeros(64, np.float32)), aligned(np.zeros(128, np.float32))
    run(PrimFunc("gather", (A, B, C), body), a, b, cc)
    np.testing.assert_array_equal(b, a[::2])
    np.testing.assert_array_equal(cc[::2], a[::2])
    np.testing.assert_array_equal(cc[1::2], 0)


def test_masked_gather_and_scatter():
    A, B = Buffer("A", (c(16),), "int32"), Buffer("B", (c(16),), "int32")
    i = Var("i")
    idx = ramp(i * c(16), 8, stride=2)  # 0, 2, ..., 14
    mask = LT(idx, Broadcast(c(9), 8))
    func = PrimFunc("mgather", (A, B), loop(i, 1, store(B, idx, load(A, idx, mask), mask)))
    a, b = aligned(np.arange(16, dtype=np.int32) + 1), aligned(np.zeros(16, np.int32))
    run(func, a, b)
    want = np.zeros(16, np.int32)
    want[0:9:2] = a[0:9:2]
    np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("op", ["add", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_vector_reduce(op, dtype, rng):
    # S[0] = reduce over 8 lanes of (lane-wise reduce over rows), an rfactored reduction
    A, S = Buffer("A", (c(64),), dtype), Buffer("S", (c(1),), dtype)
    acc = Buffer("acc", (c(8),), dtype, scope="local")
    i = Var("i")
    combine = {"add": Add, "max": Max, "min": Min}[op]
    init = {
        "add": 0,
        "max": -1e30 if dtype == "float32" else -(2**31),
        "min": 1e30 if dtype == "float32" else 2**31 - 1,
    }[op]
    lanes = ramp(c(0), 8)
    body = Allocate(
        acc,
        c(8),
        Seq(
            (
                store(acc, lanes, Broadcast(c(init, dtype), 8)),
                loop(
                    i, 8, store(acc, lanes, combine(load(acc, lanes), load(A, ramp(i * c(8), 8))))
                ),
                store(S, c(0), VectorReduce(op, load(acc, lanes))),
            )
        ),
    )
    values = rng.standard_normal(64) * 100
    a = aligned(values.astype(dtype))
    s = aligned(np.zeros(1, dtype))
    run(PrimFunc(f"vreduce_{op}", (A, S), body), a, s)
    want = {"add": np.sum, "max": np.max, "min": np.min}[op](a.astype(np.float64))
    np.testing.assert_allclose(s[0], want, rtol=1e-5)


# -- allocation -----------------------------------------------------------------------------------
def test_allocate_local_is_an_alloca_and_global_is_heap(rng):
    n, i, j = Var("n"), Var("i"), Var("j")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    local = Buffer("tmp_local", (c(16),), "float32", scope="local")
    heap = Buffer("tmp_heap", (n,), "float32", scope="global")
    body = Seq(
        (
            Allocate(
                heap,
                n,
                Seq(
                    (
                        loop(i, n, store(heap, i, Mul(load(A, i), c(3.0, "float32")))),
                        loop(i, n, store(B, i, load(heap, i))),
                    )
                ),
            ),
            loop(
                i,
                FloorDiv(n, c(16)),
                Allocate(
                    local,
                    c(16),
                    Seq(
                        (
                            loop(j, 16, store(local, j, load(B, Add(Mul(i, c(16)), j)))),
                            loop(
                                j,
                                16,
                                store(
                                    B,
                                    Add(Mul(i, c(16)), j),
                                    Add(load(local, Sub(c(15), j)), c(1.0, "float32")),
                                ),
                            ),
                        )
                    ),
                ),
            ),
        )
    )
    func = PrimFunc("alloc", (A, B, n), body)
    text = LLVMCodegen().generate(func, TARGET).text
    assert "alloca [16 x float]" in text and "aligned_alloc" in text and '@"free"' in text
    a, b = aligned(rng.standard_normal(64).astype(np.float32)), aligned(np.zeros(64, np.float32))
    run(func, a, b, 64)
    np.testing.assert_allclose(b, (a * 3).reshape(4, 16)[:, ::-1].reshape(-1) + 1, rtol=1e-6)


def test_large_local_allocation_goes_to_heap():
    local = Buffer("big", (c(100_000),), "float32", scope="local")
    B = Buffer("B", (c(1),), "float32")
    i = Var("i")
    body = Allocate(
        local,
        c(100_000),
        Seq(
            (
                loop(i, 100_000, store(local, i, Cast("float32", i))),
                store(B, c(0), load(local, c(99_999))),
            )
        ),
    )
    func = PrimFunc("bigalloc", (B,), body)
    assert "aligned_alloc" in LLVMCodegen().generate(func, TARGET).text
    b = aligned(np.zeros(1, np.float32))
    run(func, b)
    assert b[0] == 99_999


# -- control flow ---------------------------------------------------------------------------------
def test_if_then_else_letstmt_attr_evaluate():
    n, i, t = Var("n"), Var("i"), Var("t")
    B = Buffer("B", (n,), "int32")
    body = loop(
        i,
        n,
        Attr(
            "pragma_unknown",
            1,
            LetStmt(
                t,
                Mul(i, i),
                Seq(
                    (
                        Evaluate(c(0)),
                        IfThenElse(LT(t, c(20)), store(B, i, t), store(B, i, c(-1))),
                        IfThenElse(LT(i, c(1)), store(B, i, c(42))),
                    )
                ),
            ),
        ),
    )
    b = aligned(np.zeros(8, np.int32))
    run(PrimFunc("ctrl", (B, n), body), b, 8)
    np.testing.assert_array_equal(b, [42, 1, 4, 9, 16, -1, -1, -1])


def test_unrolled_and_vectorized_loop_kinds_run_serially_with_hints():
    n, i = Var("n"), Var("i")
    B = Buffer("B", (n,), "int32")
    func = PrimFunc(
        "kinds",
        (B, n),
        Seq(
            (
                loop(i, n, store(B, i, i), kind=LoopKind.VECTORIZED),
                loop(i, n, store(B, i, Add(load(B, i), c(1))), kind=LoopKind.UNROLLED),
            )
        ),
    )
    source = LLVMCodegen().generate(func, TARGET)
    assert "llvm.loop.vectorize.enable" in source.text and "llvm.loop.unroll.count" in source.text
    b = aligned(np.zeros(33, np.int32))
    run(func, b, 33)
    np.testing.assert_array_equal(b, np.arange(33) + 1)


# -- PARALLEL -------------------------------------------------------------------------------------
def _parallel_scale(kind=LoopKind.PARALLEL):
    n, i, alpha = Var("n"), Var("i"), Var("alpha", "float32")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    T = Buffer("T", (n,), "int32")
    body = loop(
        i,
        n,
        Seq(
            (
                store(B, i, Mul(load(A, i), alpha)),
                store(T, i, Call("int32", "omp_get_thread_num", ())),
            )
        ),
        kind=kind,
    )
    return PrimFunc("pscale", (A, B, T, alpha, n), body)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_parallel_loop_is_correct_and_uses_the_threads(threads, monkeypatch, rng):
    monkeypatch.setenv("TF_NUM_THREADS", threads)
    size = 1001
    a = aligned(rng.standard_normal(size).astype(np.float32))
    b, t = aligned(np.zeros(size, np.float32)), aligned(np.full(size, -1, np.int32))
    source, exe = compile_func(_parallel_scale())
    assert "GOMP_parallel" in source.text
    exe.call([a.ctypes.data, b.ctypes.data, t.ctypes.data, 1.5, size])
    np.testing.assert_array_equal(b, a * np.float32(1.5))
    # static contiguous chunks: thread k ran iterations [k*n/T, (k+1)*n/T)
    count = int(threads)
    want = np.repeat(np.arange(count), np.diff([k * size // count for k in range(count + 1)]))
    np.testing.assert_array_equal(t, want)


def test_parallel_thread_count_is_read_at_each_call(monkeypatch):
    size = 64
    a, b = aligned(np.ones(size, np.float32)), aligned(np.zeros(size, np.float32))
    t = aligned(np.zeros(size, np.int32))
    _, exe = compile_func(_parallel_scale())
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    exe.call([a.ctypes.data, b.ctypes.data, t.ctypes.data, 2.0, size])
    assert set(t.tolist()) == {0, 1}
    monkeypatch.setenv("TF_NUM_THREADS", "1")
    exe.call([a.ctypes.data, b.ctypes.data, t.ctypes.data, 2.0, size])
    assert set(t.tolist()) == {0}


def test_nested_parallel_runs_inner_serially_with_local_and_heap_buffers(monkeypatch, rng):
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    rows, cols = 13, 40
    i, j, k = Var("i"), Var("j"), Var("k")
    m = Var("m")
    A, B = Buffer("A", (m, c(cols)), "float32"), Buffer("B", (m, c(cols)), "float32")
    row = Buffer("row", (c(cols),), "float32", scope="local")
    heap = Buffer("heap", (c(cols),), "float32", scope="global")
    offset = Mul(i, c(cols))
    body = loop(
        i,
        m,
        Allocate(
            row,
            c(cols),
            Allocate(
                heap,
                c(cols),
                Seq(
                    (
                        loop(
                            j, cols, store(row, j, load(A, Add(offset, j))), kind=LoopKind.PARALLEL
                        ),
                        loop(k, cols, store(heap, k, Add(load(row, k), c(1.0, "float32")))),
                        loop(
                            j,
                            cols,
                            store(
                                B,
                                Add(offset, j),
                                Mul(load(heap, Sub(c(cols - 1), j)), Cast("float32", i)),
                            ),
                        ),
                    )
                ),
            ),
        ),
        kind=LoopKind.PARALLEL,
    )
    func = PrimFunc("nested", (A, B, m), body)
    source = LLVMCodegen().generate(func, TARGET)
    assert source.text.count('call void @"GOMP_parallel"') == 1  # the inner one is serial
    a = aligned(rng.standard_normal((rows, cols)).astype(np.float32))
    b = aligned(np.zeros((rows, cols), np.float32))
    run(func, a, b, rows)
    np.testing.assert_allclose(
        b, (a[:, ::-1] + 1) * np.arange(rows, dtype=np.float32)[:, None], rtol=1e-6
    )


def test_parallel_vectorized_body_and_symbolic_min(monkeypatch, rng):
    monkeypatch.setenv("TF_NUM_THREADS", "2")
    n, i, lo = Var("n"), Var("i"), Var("lo")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = ramp(i * c(8), 8)
    body = For(
        i,
        lo,
        Sub(FloorDiv(n, c(8)), lo),
        store(B, idx, Call("float32x8", "sigmoid", (load(A, idx),))),
        LoopKind.PARALLEL,
    )
    a = aligned(rng.standard_normal(256).astype(np.float32))
    b = aligned(np.zeros(256, np.float32))
    run(PrimFunc("psig", (A, B, n, lo), body), a, b, 256, 2)
    np.testing.assert_array_equal(b[:16], 0)
    np.testing.assert_allclose(b[16:], 1 / (1 + np.exp(-a[16:].astype(np.float64))), rtol=1e-6)


# -- errors ---------------------------------------------------------------------------------------
def test_sync_is_a_build_error_naming_the_function():
    with pytest.raises(BuildError, match="'barrier'.*Sync"):
        LLVMCodegen().generate(PrimFunc("barrier", (), Sync()), TARGET)


def test_undefined_variable_is_a_build_error():
    B, x = Buffer("B", (c(1),), "int32"), Var("x")
    with pytest.raises(BuildError, match="'undef'.*'x'"):
        LLVMCodegen().generate(PrimFunc("undef", (B,), store(B, c(0), x)), TARGET)


def test_thread_binding_and_integer_div_are_build_errors():
    B, i = Buffer("B", (c(4),), "int32"), Var("i")
    bound = For(i, c(0), c(4), store(B, i, i), LoopKind.THREAD_BINDING, "threadIdx.x")
    with pytest.raises(BuildError, match="'gpu'.*threadIdx.x"):
        LLVMCodegen().generate(PrimFunc("gpu", (B,), bound), TARGET)
    with pytest.raises(BuildError, match="'idiv'"):
        LLVMCodegen().generate(PrimFunc("idiv", (B,), store(B, c(0), Div(c(1), c(2)))), TARGET)


def test_unknown_intrinsic_is_a_build_error():
    B = Buffer("B", (c(1),), "float32")
    with pytest.raises(BuildError, match="'bad'.*'frobnicate'"):
        LLVMCodegen().generate(
            PrimFunc(
                "bad", (B,), store(B, c(0), Call("float32", "frobnicate", (c(1.0, "float32"),)))
            ),
            TARGET,
        )


def test_get_source_formats():
    _, exe = compile_func(unary_kernel("src", lambda v: Add(v, v), 1))
    assert "define void @src" in exe.get_source("ll")
    assert "src:" in exe.get_source("asm")
    with pytest.raises(BuildError):
        exe.get_source("ptx")


def test_kernels_with_one_name_coexist_and_outlive_each_other(rng):
    import gc

    def scale(factor):
        n, i = Var("n"), Var("i")
        A = Buffer("A", (n,), "float32")
        body = loop(i, n, store(A, i, Mul(load(A, i), c(factor, "float32"))))
        return compile_func(PrimFunc("same_name", (A, n), body))[1]

    doubler, tripler = scale(2.0), scale(3.0)
    a = aligned(np.ones(16, np.float32))
    doubler.call([a.ctypes.data, 16])
    del doubler
    gc.collect()
    tripler.call([a.ctypes.data, 16])
    np.testing.assert_array_equal(a, 6.0)


def test_missing_external_symbol_is_a_build_error():
    from tensorforge.codegen.base import KernelSource

    text = (
        "declare void @tf_no_such_symbol()\n"
        "define void @f() {\n  call void @tf_no_such_symbol()\n  ret void\n}\n"
    )
    with pytest.raises(BuildError, match="tf_no_such_symbol"):
        LLVMExecutable(KernelSource("llvm", "f", text, ()), TARGET)


def test_scalar_max_reduction_matches_numpy_and_propagates_nan(rng):
    # float Max is compare + select (not llvm.maxnum, which drops NaN and which LLVM 15's -O3
    # miscompiled in a reduction); a schedule vectorizes max reductions explicitly (rfactor)
    n, i = Var("n"), Var("i")
    A, S = Buffer("A", (n,), "float32"), Buffer("S", (c(1),), "float32")
    body = Seq(
        (
            store(S, c(0), c(-np.inf, "float32")),
            loop(i, n, store(S, c(0), Max(load(S, c(0)), load(A, i)))),
        )
    )
    func = PrimFunc("smax", (A, S, n), body)
    a, s = aligned(rng.standard_normal(1000).astype(np.float32)), aligned(np.zeros(1, np.float32))
    run(func, a, s, 1000)
    assert s[0] == a.max()
    for where in (0, 517, 999):
        a_nan = a.copy()
        a_nan[where] = np.nan
        run(func, a_nan, s, 1000)
        assert np.isnan(s[0]), where


def test_buffer_params_claim_element_alignment_unless_told_more(rng):
    # numpy arrays are used in place (API.md), so a param is only promised element alignment:
    # a vectorized kernel must run on arrays that start 4 bytes past a 64-byte boundary
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = ramp(i * c(8), 8)
    body = loop(i, FloorDiv(n, c(8)), store(B, idx, Call("float32x8", "exp", (load(A, idx),))))
    func = PrimFunc("unaligned", (A, B, n), body)
    raw_a, raw_b = aligned(np.zeros(1025, np.float32)), aligned(np.zeros(1025, np.float32))
    a, b = raw_a[1:], raw_b[1:]  # 4 bytes off
    a[:] = rng.standard_normal(1024).astype(np.float32)
    run(func, a, b, 1024)
    np.testing.assert_allclose(b, np.exp(a), rtol=1e-6)

    from tensorforge.codegen.llvm import PARAM_ALIGN_ATTR

    told = dataclasses.replace(func, attrs=((PARAM_ALIGN_ATTR, 64),))
    assert "ptr noalias align 64" in LLVMCodegen().generate(told, TARGET).text


def test_object_code_links_into_a_shared_library(tmp_path, rng):
    import ctypes
    import shutil
    import subprocess

    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    body = loop(i, n, store(B, i, Call("float32", "tanh", (load(A, i),))), kind=LoopKind.PARALLEL)
    _, exe = compile_func(PrimFunc("exported", (A, B, n), body))
    obj = exe.object_code()
    assert obj[:4] == b"\x7fELF"
    if shutil.which("cc") is None:
        pytest.skip("no C compiler to link with")
    (tmp_path / "k.o").write_bytes(obj)
    library = tmp_path / "k.so"
    subprocess.run(["cc", "-shared", "-o", library, tmp_path / "k.o", "-lgomp", "-lm"], check=True)
    kernel = ctypes.CDLL(str(library)).exported
    a, b = aligned(rng.standard_normal(100).astype(np.float32)), aligned(np.zeros(100, np.float32))
    kernel(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data), ctypes.c_int32(100))
    np.testing.assert_allclose(b, np.tanh(a), rtol=1e-6, atol=1e-7)
