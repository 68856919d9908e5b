"""vectorize_partial_combines: a serial combine of contiguous partials -> one vector reduction;
anything else (a strided or lane-dependent read, a masked or vector store, other ops) kept."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.expr import BufferLoad, Ramp, VectorReduce
from tensorforge.ir.passes.vectorize_partial_combines import vectorize_partial_combines
from tensorforge.ir.stmt import BufferStore
from tensorforge.te.expr import Add, Max, Mul, Var
from tests.ir.builders import buf, c, loop

ACC, P = buf("acc", 4), buf("partial", 256)


def combine(op, index, extent=64, acc_index=None):
    v, i = Var("v"), Var("i")
    at = (acc_index if acc_index is not None else i,)
    value = op(BufferLoad(ACC, at), BufferLoad(P, (index(i, v),)))
    return loop(v, extent, BufferStore(ACC, at, value)), i


@pytest.mark.parametrize("op, name", [(Add, "add"), (Max, "max")])
def test_contiguous_partials_become_one_reduction(op, name):
    stmt, i = combine(op, lambda i, v: i * 64 + v)
    out = vectorize_partial_combines(stmt)
    assert isinstance(out, BufferStore)
    reduced = out.value.b
    assert isinstance(reduced, VectorReduce) and reduced.op == name
    (index,) = reduced.value.indices
    assert isinstance(index, Ramp) and index.lanes == 64 and index.stride == c(1)


@pytest.mark.parametrize(
    "index",
    [lambda i, v: i * 64 + v * 2, lambda i, v: v * i, lambda i, v: c(3)],
    ids=["strided", "scaled by a variable", "one element"],
)
def test_other_reads_keep_the_loop(index):
    stmt, _ = combine(Add, index)
    assert vectorize_partial_combines(stmt) is stmt


def test_an_accumulator_that_moves_with_the_loop_keeps_it():
    v = Var("v")
    stmt = loop(v, 64, BufferStore(ACC, (v,), Add(BufferLoad(ACC, (v,)), BufferLoad(P, (v,)))))
    assert vectorize_partial_combines(stmt) is stmt


def test_products_and_long_loops_keep_the_loop():
    product, _ = combine(Mul, lambda i, v: i * 64 + v)
    long, _ = combine(Add, lambda i, v: v, extent=4096)
    assert vectorize_partial_combines(product) is product
    assert vectorize_partial_combines(long) is long


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
@pytest.mark.parametrize("m", [197, 64, 8])
def test_rfactor_row_reductions_match_numpy(target, m):
    """Row max and sum through rfactor'ed partials (4 vectors a row), combined as reductions,
    with NaN and -0.0 rows: max propagates NaN as the scalar Max does."""
    n = 5
    x = te.placeholder((n, m), name="x")
    k1, k2 = te.reduce_axis((0, m), name="k1"), te.reduce_axis((0, m), name="k2")
    mx = te.compute((n,), lambda i: te.max(x[i, k1], axis=k1), name="mx")
    sm = te.compute((n,), lambda i: te.sum(x[i, k2], axis=k2), name="sm")
    s = te.create_schedule([mx.op, sm.op])
    lanes = tf.Target(target).vector_lanes()
    for out, k in ((mx, k1), (sm, k2)):
        _, ki = s[out].split(k, factor=min(4 * lanes, m))
        partial = s.rfactor(out, ki, factor_axis=1)
        acc, vec = s[partial].split(s[partial].op.axis[1], factor=min(lanes, m))
        s[partial].vectorize(vec)
    text = str(tf.lower(s, [x, mx, sm], target=target))
    assert "reduce_max(" in text and "reduce_add(" in text
    f = tf.build(s, [x, mx, sm], target=target)
    data = np.random.default_rng(m).standard_normal((n, m)).astype("float32")
    data[1, m // 2] = np.nan
    data[2] = -0.0
    got_max, got_sum = tf.nd.empty((n,), "float32"), tf.nd.empty((n,), "float32")
    f(tf.nd.array(data), got_max, got_sum)
    np.testing.assert_allclose(got_max.numpy(), data.max(axis=1), rtol=0, atol=0)
    np.testing.assert_allclose(got_sum.numpy(), data.sum(axis=1), rtol=1e-5, atol=1e-5)
