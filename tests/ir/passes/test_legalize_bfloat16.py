"""legalize_bfloat16: bfloat16 values computed in float32, rounded after each operation."""

import pytest

from tensorforge.ir.passes.legalize_bfloat16 import legalize_bfloat16
from tensorforge.ir.stmt import LetStmt
from tensorforge.te.expr import Cast, Const, Select, Var
from tests.ir.builders import buf, f32, load, store

A, B = buf("A", 8, "bfloat16"), buf("B", 8, "bfloat16")
F = buf("F", 8)


def f32_of(x):
    return Cast("float32", x)


def bf16(x):
    return Cast("bfloat16", x)


def test_one_operation_widens_its_operands_and_narrows_the_store():
    i = Var("i")
    before = store(B, i, load(A, i) * Const(3.0, "bfloat16"))
    assert legalize_bfloat16(before) == store(B, i, bf16(f32_of(load(A, i)) * f32(3.0)))


def test_each_intermediate_result_is_rounded_to_bfloat16():
    i = Var("i")
    before = store(B, i, load(A, i) * Const(3.0, "bfloat16") + load(A, i))
    product = f32_of(bf16(f32_of(load(A, i)) * f32(3.0)))  # rounded, then widened again
    assert legalize_bfloat16(before) == store(B, i, bf16(product + f32_of(load(A, i))))


def test_constants_are_rounded_to_bfloat16_values():
    i = Var("i")
    before = store(B, i, load(A, i) + Const(0.1, "bfloat16"))
    out = legalize_bfloat16(before)
    assert out.value.value.b == f32(0.10009765625)  # 0.1 in bfloat16


def test_a_select_of_bfloat16_values_is_stored_without_a_rounding():
    # a zero-padding copy: no float32 round trip (the select only moves 16-bit values)
    i = Var("i")
    before = store(B, i, Select(i < 5, load(A, i), Const(0.0, "bfloat16")))
    after = store(B, i, Select(i < 5, load(A, i), bf16(f32(0.0))))
    assert legalize_bfloat16(before) == after


def test_a_select_inside_arithmetic_is_widened_not_rounded():
    i = Var("i")
    before = store(B, i, Select(i < 5, load(A, i), load(A, i)) * Const(2.0, "bfloat16"))
    wide = Select(i < 5, f32_of(load(A, i)), f32_of(load(A, i)))
    assert legalize_bfloat16(before) == store(B, i, bf16(wide * f32(2.0)))


def test_bfloat16_let_variable_becomes_float32():
    i, x = Var("i"), Var("x", "bfloat16")
    before = LetStmt(x, load(A, i), store(B, i, x * x))
    out = legalize_bfloat16(before)
    assert out.var.dtype == "float32" and out.var.name == "x"
    assert out == LetStmt(out.var, f32_of(load(A, i)), store(B, i, bf16(out.var * out.var)))


def test_float32_code_is_unchanged():
    i = Var("i")
    before = store(F, i, load(F, i) * 2.0)
    assert legalize_bfloat16(before) == before


def _trace(target, bind=False):
    import contextlib
    import io

    import tensorforge as tf
    from tensorforge import te

    X = te.placeholder((64,), "bfloat16", name="X")
    Y = te.compute((64,), lambda i: X[i] * 3.0, name="Y")
    s = te.create_schedule(Y.op)
    if bind:
        bx, tx = s[Y].split(Y.op.axis[0], factor=32)
        s[Y].bind(bx, te.thread_axis("blockIdx.x"))
        s[Y].bind(tx, te.thread_axis("threadIdx.x"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        func = tf.lower(s, [X, Y], target=target, trace=True)
    return out.getvalue(), str(func)


def test_a_pipeline_pass_for_targets_without_bfloat16_arithmetic():
    # llvm and c compute bfloat16 in float32 (a Target fact: KindFacts.bfloat16_arithmetic)
    for target in ("llvm", "c"):
        text, func = _trace(target)
        assert "# after legalize_bfloat16" in text and "float32(X[" in func
    text, func = _trace("cuda", bind=True)
    assert "legalize_bfloat16" not in text and "float32(" not in func


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_a_vectorized_zero_padding_copy_of_bfloat16(target):
    import numpy as np

    import tensorforge as tf
    from tensorforge import te
    from tensorforge.te.dtype import from_bfloat16, to_bfloat16

    n = 37
    A = te.placeholder((n, n), "bfloat16", name="A")
    zero = te.const(0, "bfloat16")
    P = te.compute(
        (48, 64), lambda i, j: te.if_then_else(te.all(i < n, j < n), A[i, j], zero), name="P"
    )
    s = te.create_schedule(P.op)
    _, lanes = s[P].split(P.op.axis[1], factor=16)
    s[P].vectorize(lanes)
    f = tf.build(s, [A, P], target=target)
    a = to_bfloat16(np.random.default_rng(0).uniform(-1, 1, (n, n)))
    out = tf.nd.array(to_bfloat16(np.ones((48, 64))))
    f(tf.nd.array(a), out)
    expected = np.zeros((48, 64))
    expected[:n, :n] = from_bfloat16(a)
    np.testing.assert_array_equal(from_bfloat16(out.numpy()), expected)
