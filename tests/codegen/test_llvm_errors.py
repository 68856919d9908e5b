"""The llvm backend: build errors naming the function, get_source formats, symbols, parameter
alignment and linking object code into a shared library."""

import dataclasses

import numpy as np
import pytest

from tensorforge.codegen.llvm import LLVMCodegen
from tensorforge.errors import BuildError
from tensorforge.ir.expr import Buffer
from tensorforge.ir.stmt import (
    For,
    LoopKind,
    PrimFunc,
    Seq,
    Sync,
)
from tensorforge.runtime.llvm_exec import LLVMExecutable
from tensorforge.te.expr import (
    Add,
    Call,
    Div,
    FloorDiv,
    Max,
    Mul,
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
    unary_kernel,
)


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
