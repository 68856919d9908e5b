"""Integer operands of two widths in one operation: an int64 axis split into a constant inner
extent got loop bounds of int32, and simplifying the single-iteration loop away made `inner +
outer` an int32 sum of an int64 variable (`int32(x) % int64(m)`). Loops are now built with
bounds of their variable's type, and the IR verifier refuses operands of two widths."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te


def _axis(stage, name):
    return next(v for v in stage.leaf_iter_vars if v.name == name)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_fused_symbolic_axis_split_with_a_guard_builds_and_runs(target):
    """fuzz seed 7 #271 (--target c): `int32(fused) % int64(m)` failed LLVM codegen."""
    n, m = te.var("n"), te.var("m")
    A = te.placeholder((n, m), name="A")
    B = te.placeholder((m,), name="B")
    C = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + B[j], name="C")
    D = te.compute((n, m), lambda i, j: te.max(C[i, j], 0.0) - A[i, j], name="D")
    s = te.create_schedule(D.op)
    s[C].tile(_axis(s[C], "j"), _axis(s[C], "i"), 7, 3, tail="auto")
    s[D].fuse(_axis(s[D], "i"), _axis(s[D], "j"))
    s[C].tile(_axis(s[C], "j.inner"), _axis(s[C], "j.outer"), 16, 4, tail="auto")
    s[D].split(_axis(s[D], "i.j.fused"), factor=1, tail="guard")
    lowered = str(tf.lower(s, [A, B, D], target=target))
    assert "int32(i.j.fused.outer)" not in lowered  # the int64 fused index is never narrowed
    mod = tf.build(s, [A, B, D], target=target)
    rng = np.random.default_rng(271)
    for shape in [(3, 2), (1, 1), (5, 13)]:
        a = rng.standard_normal(shape).astype("float32")
        b = rng.standard_normal(shape[1]).astype("float32")
        d = np.empty(shape, "float32")
        mod(a, b, d)
        np.testing.assert_allclose(d, np.maximum(a * 2 + b, 0) - a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_prefetch_of_a_region_with_an_int64_extent(target):
    """fuzz --target llvm seed 14 #355: a prefetch loop over lines of an int64 region had an int32
    variable (refused by the IR verifier: loop bounds not of the loop's type)."""
    X = te.placeholder((32,), name="X")
    Y = te.compute((35,), lambda i: X[(i.astype("int64") * 1099511627783 + 4295032832) % 32] * 2.0)
    s = te.create_schedule(Y.op)
    outer, _ = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].prefetch(X, outer, 1)
    assert "for X.line in range(int64(2))" in str(tf.lower(s, [X, Y], target=target))
    x = np.random.default_rng(355).standard_normal(32).astype("float32")
    y = np.empty(35, "float32")
    tf.build(s, [X, Y], target=target)(x, y)
    index = (np.arange(35, dtype=object) * 1099511627783 + 4295032832) % 32
    np.testing.assert_allclose(y, x[index.astype(np.int64)] * 2, rtol=1e-6)
