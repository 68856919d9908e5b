"""Expression building: dtype rules, errors, printing."""

import pytest

import tensorforge as tf
from tensorforge import te


def test_python_int_takes_other_dtype():
    x = te.var("x", dtype="int64")
    assert (x + 1).dtype == "int64"
    f = te.placeholder((4,), dtype="float16", name="F")
    assert (f[0] * 2).dtype == "float16"


def test_python_float_promotes_int_to_float32():
    x = te.var("x")
    assert (x * 2.0).dtype == "float32"


def test_promotion_lattice():
    a = te.var("a", "int8")
    b = te.var("b", "int32")
    assert (a + b).dtype == "int32"
    f32 = te.placeholder((1,), "float32", "f")[0]
    f64 = te.placeholder((1,), "float64", "g")[0]
    assert (f32 + f64).dtype == "float64"
    assert (b + f32).dtype == "float32"


def test_lossy_mix_raises():
    big = te.var("big", "int64")
    f = te.placeholder((1,), "float32", "f")[0]
    with pytest.raises(tf.ExprError, match="int64 and float32"):
        big + f


def test_integer_true_division_raises():
    x = te.var("x")
    with pytest.raises(TypeError, match="//"):
        x / 2


def test_expr_has_no_truth_value():
    x = te.var("x")
    with pytest.raises(TypeError, match="truth value"):
        if x < 3:
            pass


def test_astype_and_printing():
    x = te.var("x")
    e = (x * 2 + 1).astype("float32")
    assert str(e) == "float32(x * 2 + 1)"
    assert str(x - (x - 1)) == "x - (x - 1)"


def test_axis_names_from_lambda():
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda row, col: A[row, col], name="B")
    assert [a.name for a in B.op.axis] == ["row", "col"]
    assert B.ndim == 2 and B.dtype == "float32"


def test_math_intrinsics_dtype():
    A = te.placeholder((3,), name="A", dtype="float64")
    for fn in (te.exp, te.log, te.sqrt, te.tanh, te.sigmoid, te.erf, te.abs, te.floor):
        assert fn(A[0]).dtype == "float64"
    assert te.power(A[0], 2).dtype == "float64"
    i = te.var("i")
    assert te.exp(i).dtype == "float32"


def test_op_graph_topological():
    from tensorforge.te.graph import topological_ops

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1, name="B")
    C = te.compute((4,), lambda i: A[i] * 2, name="C")
    D = te.compute((4,), lambda i: B[i] + C[i], name="D")
    order = topological_ops([D.op])
    assert order[0] is A.op and order[-1] is D.op
    assert {op.name for op in order} == {"A", "B", "C", "D"}


def test_bfloat16_constants_are_checked_as_bfloat16_values():
    # bfloat16 is stored as uint16 bit patterns: a negative constant is no overflow
    assert te.const(-1.5, "bfloat16").value == -1.5
    with pytest.raises(tf.ExprError, match="does not fit bfloat16"):
        te.const(3.4e38, "bfloat16")  # rounds up past bfloat16's largest, 3.39e38
