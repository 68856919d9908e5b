"""The llvm backend on hand-built lowered PrimFuncs, JIT-compiled and checked against numpy:
arithmetic, casts, selects. Vector memory and allocation: test_llvm_memory.py; loops and PARALLEL:
test_llvm_loops.py; errors, sources and linking: test_llvm_errors.py; math intrinsics:
test_llvm_math.py."""

import numpy as np
import pytest

from tensorforge.codegen import CODEGENS
from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.ir.expr import Broadcast, Buffer, Ramp
from tensorforge.ir.stmt import (
    For,
    PrimFunc,
    Seq,
)
from tensorforge.te.expr import (
    LT,
    Add,
    Cast,
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
from tests.codegen.llvm_builders import (
    TARGET,
    aligned,
    c,
    load,
    loop,
    ramp,
    run,
    store,
)


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


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integer_division_in_masked_lanes_does_not_trap(dtype):
    """A guarded vector tail loads 0 into its inactive lanes (masked loads); x86 has no vector
    integer division, so each lane is an idiv, and one by that 0 raised SIGFPE, killing the
    process (torch's `a // b` of integer tensors at a run-time size, 13 elements in 16 lanes)."""
    n, i, lanes = Var("n"), Var("i"), 16
    X, D, Q, R = (Buffer(name, (n,), dtype) for name in "XDQR")
    index = ramp(i * c(lanes), lanes)
    inside = LT(index, Broadcast(n, lanes))
    x, d = load(X, index, inside), load(D, index, inside)
    body = loop(
        i,
        FloorDiv(n + c(lanes - 1), c(lanes)),
        Seq((store(Q, index, FloorDiv(x, d), inside), store(R, index, FloorMod(x, d), inside))),
    )
    size = 13
    values = np.arange(size) * 7 % 50 - (0 if dtype == "uint8" else 25)
    divisors = np.arange(size) % 5 + 1
    if dtype != "uint8":
        divisors *= np.where(np.arange(size) % 2, -1, 1)
    arrays = [aligned(values.astype(dtype)), aligned(divisors.astype(dtype))]
    arrays += [aligned(np.zeros(size, dtype)) for _ in range(2)]
    run(PrimFunc("masked_div", (X, D, Q, R, n), body), *arrays, size)
    np.testing.assert_array_equal(arrays[2], arrays[0] // arrays[1])
    np.testing.assert_array_equal(arrays[3], arrays[0] % arrays[1])


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


@pytest.mark.parametrize("width", [56, 24, 40, 58, 14, 6, 12])
@pytest.mark.parametrize(
    "target, lanes", [("llvm -mattr=+avx512f,+avx2,+fma,+avx", 16), ("llvm -mcpu=znver3", 8)]
)
def test_odd_width_register_tile_epilogue_stays_in_vector_registers(width, target, lanes):
    """A register tile row of a width that is not a power of two (56 floats: 32 + 16 + 8),
    accumulated in a loop and then scaled, shifted and clamped (a fused BN + ReLU): right
    against NumPy, and its arithmetic done in power-of-two pieces. As whole <56 x float>
    values, the accumulators read after the reduction loop were rebuilt lane by lane (one
    vinsertps per lane: the epilogue cost twice a separate pass). AVX-512 and AVX2 registers."""
    import tensorforge as tf
    from tensorforge import te

    n, k = 8, 16
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, width), name="B")
    scale = te.placeholder((n,), name="scale")
    shift = te.placeholder((n,), name="shift")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, width), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    D = te.compute((n, width), lambda i, j: te.max(C[i, j] * scale[i] + shift[i], 0.0), name="D")
    s = te.create_schedule(D.op)
    rows, row = s[D].split(D.op.axis[0], factor=4)
    s[D].vectorize(D.op.axis[1])
    s[C].compute_at(s[D], rows)
    ci, cj = s[C].op.axis
    s[C].reorder(s[C].op.reduce_axis[0], ci, cj)
    s[C].unroll(ci)
    s[C].vectorize(cj)
    mod = tf.build(s, [A, B, scale, shift, D], target=tf.Target(target))
    rng = np.random.default_rng(width)
    a, b = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, width), np.float32)
    sc, sh = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    out = tf.nd.array(np.zeros((n, width), np.float32))
    mod(tf.nd.array(a), tf.nd.array(b), tf.nd.array(sc), tf.nd.array(sh), out)
    want = np.maximum((a @ b) * sc[:, None] + sh[:, None], 0.0)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    # in pieces over several registers, no lane assembled alone; whole within one register
    # (14 of 16 lanes: one FMA a row, not 8 + 4 + 2 lanes in 3)
    whole = f"<{width} x float> @llvm.maximum" in mod.get_source("ll")
    assert whole == (width < lanes)
    if not whole:
        assert "vinsertps" not in mod.get_source("asm")
