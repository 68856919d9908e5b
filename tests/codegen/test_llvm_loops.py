"""The llvm backend: control flow, loop kinds and PARALLEL loops on libgomp threads."""

import numpy as np
import pytest

from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import (
    Allocate,
    Attr,
    Evaluate,
    For,
    IfThenElse,
    LetStmt,
    LoopKind,
    PrimFunc,
    Seq,
)
from tensorforge.te.expr import (
    LT,
    Add,
    Call,
    Cast,
    FloorDiv,
    Mul,
    Sub,
    Var,
)
from tests.codegen.llvm_builders import (
    TARGET,
    aligned,
    c,
    compile_func,
    load,
    loop,
    ramp,
    run,
    store,
)


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
