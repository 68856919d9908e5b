"""unmask_private_stores: a masked vector store into a kernel's own small buffer writes every lane
(the masked-off ones their old value), where one thread owns the buffer and holds every lane."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.expr import Broadcast, Ramp
from tensorforge.ir.passes.unmask_private_stores import unmask_private_stores
from tensorforge.ir.pipeline import passes_for
from tensorforge.ir.stmt import Allocate, LoopKind
from tensorforge.target import Target
from tensorforge.te.expr import LT, Max, Select, Var
from tests.ir.builders import buf, c, load, loop, store

N = Var("n")  # a row length known at run time
RF, X = buf("rf", 64), buf("x", N)


def _tail_step(rf=RF, at=48):
    """rf[at:at+16] = max(rf[at:at+16], x[at:at+16] if at+lane < n) if at+lane < n"""
    lanes = Ramp(c(at), c(1), 16)
    mask = LT(lanes, Broadcast(N, 16))
    value = Max(load(rf, lanes), load(X, lanes, mask))
    return store(rf, lanes, value, mask), mask, value, lanes


def test_a_masked_store_into_an_own_buffer_writes_the_old_lanes_back():
    step, mask, value, lanes = _tail_step()
    expected = store(RF, lanes, Select(mask, value, load(RF, lanes)))
    assert unmask_private_stores(Allocate(RF, c(64), step)) == Allocate(RF, c(64), expected)
    i = Var("i")
    inside_a_serial_loop = Allocate(RF, c(64), loop(i, 4, step))
    assert unmask_private_stores(inside_a_serial_loop).body.body == expected


def test_a_store_stays_masked_where_another_thread_or_past_the_buffer_could_be_touched():
    step, *_ = _tail_step()
    i = Var("i")
    shared = Allocate(RF, c(64), loop(i, 4, step, kind=LoopKind.PARALLEL))  # rows in parallel
    not_allocated = step  # a parameter: the caller's memory
    past_the_end, *_ = _tail_step(at=56)  # lanes 56..71 of a 64-element buffer
    too_small = Allocate(RF, c(64), past_the_end)
    at_run_time = Allocate(RF, N, step)  # no constant extent to prove the lanes inside
    for stmt in (shared, not_allocated, too_small, at_run_time):
        assert unmask_private_stores(stmt) == stmt


def test_a_mask_known_lane_by_lane_stays_a_mask():
    """Codegen stores its on lanes as plain pieces; a select would load the old lanes too (a
    register tile's padded last vector: conv2d 3x3 at 14 x 14 x 256 1.70 -> 1.87 ms)."""
    lanes = Ramp(c(0), c(1), 16)
    mask = LT(lanes, Broadcast(c(14), 16))
    step = store(RF, lanes, Max(load(RF, lanes), load(X, lanes)), mask)
    stmt = Allocate(RF, c(64), step)
    assert unmask_private_stores(stmt) == stmt


def test_the_gpu_pipeline_leaves_stores_masked():
    assert unmask_private_stores in passes_for(Target("llvm"))
    assert unmask_private_stores not in passes_for(Target("cuda"))


@pytest.mark.parametrize("m", [2, 5, 16, 17, 63, 64, 65, 197, 1000])
def test_vector_partials_of_a_run_time_row_length_reduce_it_exactly(m):
    # each row's max over m elements in 4 x 16 vector partials, the last step's lanes past the
    # row masked: the store of each partial is whole after this pass
    rows, n = te.size_var("rows", min_value=1), te.size_var("m", min_value=2)
    x = te.placeholder((rows, n), name="x")
    k = te.reduce_axis((0, n), name="k")
    mx = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="mx")
    s = te.create_schedule(mx.op)
    _, ki = s[mx].split(k, factor=64)
    partial = s.rfactor(mx, ki, 1)  # partials [rows, 64]
    s[partial].compute_at(s[mx], s[mx].op.axis[0])
    row, lane = s[partial].op.axis
    acc, vec = s[partial].split(lane, factor=16)
    s[partial].reorder(row, *s[partial].op.reduce_axis, acc, vec)
    s[partial].unroll(acc)
    s[partial].vectorize(vec)
    func = tf.lower(s, [x, mx])
    assert "select(" in str(func)  # the tail's partial stores, whole
    f = tf.build(s, [x, mx])
    data = np.random.default_rng(m).standard_normal((3, m)).astype("float32")
    got = tf.nd.array(np.zeros(3, "float32"))
    f(tf.nd.array(data), got)
    np.testing.assert_array_equal(got.numpy(), data.max(axis=1))
