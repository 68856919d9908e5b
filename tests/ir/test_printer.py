"""Printer snapshots: the lowered IR of small schedules reads like Python."""

import contextlib
import io

import tensorforge as tf
from tensorforge import te


def test_compute_at_and_vectorize_snapshot():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    o, i = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], o)
    s[C].vectorize(i)
    assert (
        str(tf.lower(s, [A, C]))
        == """\
def main(A: float32[10], C: float32[10]):
    for i.outer in range(2):
        B = allocate(float32[4], scope='global')
        for i in range(4):
            B[i] = A[i.outer * 4 + i] * 2.0
        C[ramp(i.outer * 4, 1, 4)] = B[ramp(0, 1, 4)] + broadcast(1.0, 4)
    B = allocate(float32[4], scope='global')
    for i in range(4):
        if i + 8 < 10:
            B[i] = A[i + 8] * 2.0
    C[ramp(8, 1, 2)] = B[ramp(0, 1, 2)] + broadcast(1.0, 2)"""
    )


def test_dynamic_reduction_with_where_snapshot():
    n = te.var("n")
    X = te.placeholder((n, 8), name="X")
    k = te.reduce_axis((0, 8), name="k")
    Y = te.compute((n,), lambda r: te.max(X[r, k], axis=k, where=X[r, k] > 0.0), name="Y")
    s = te.create_schedule(Y.op)
    s[Y].parallel(Y.op.axis[0])
    assert (
        str(tf.lower(s, [X, Y]))
        == """\
def main(X: float32[n, 8], Y: float32[n], n: int32):
    for r in range(n):  # parallel
        Y[r] = -inf
        for k in range(8):
            if X[int64(r) * int64(8) + int64(k)] > 0.0:
                Y[r] = max(Y[r], X[int64(r) * int64(8) + int64(k)])"""
    )


def test_guard_tail_and_unroll_snapshot():
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=3, tail="guard")
    s[B].unroll(i)
    assert (
        str(tf.lower(s, [A, B]))
        == """\
def main(A: float32[7], B: float32[7]):
    for i.outer in range(3):
        B[i.outer * 3] = A[i.outer * 3] + 1.0
        if i.outer * 3 + 1 < 7:
            B[i.outer * 3 + 1] = A[i.outer * 3 + 1] + 1.0
        if i.outer * 3 + 2 < 7:
            B[i.outer * 3 + 2] = A[i.outer * 3 + 2] + 1.0"""
    )


def test_trace_prints_ir_after_each_pass():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tf.lower(s, [A, B], trace=True)
    text = out.getvalue()
    for name in (
        "flatten_storage",
        "simplify",
        "vectorize_loops",
        "unroll_loops",
        "fold_lane_masks",
    ):
        assert f"# after {name}" in text
    assert "ramp(0, 1, 8)" in text


def test_debug_mode_verifies_after_every_pass(monkeypatch):
    monkeypatch.setenv("TF_DEBUG_PASSES", "1")
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    o, i = s[B].split(B.op.axis[0], factor=4)
    s[B].vectorize(i)
    assert "ramp" in str(tf.lower(s, [A, B]))  # every intermediate IR passes the verifier
