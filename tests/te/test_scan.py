"""te.scan against NumPy: cumulative sums, 2-D states, scheduled and multi-stage updates."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te


def _run(s, args, inputs, out_shape):
    f = tf.build(s, args)
    out = tf.nd.empty(out_shape, "float32")
    f(*[tf.nd.array(x) for x in inputs], out)
    return out.numpy()


def _cumsum():
    m, n = te.var("m"), te.var("n")
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t - 1, i] + X[t, i], name="update")
    return X, init, update, te.scan(init, update, state, inputs=[X], name="cumsum")


@pytest.mark.parametrize("shape", [(7, 5), (1, 3), (13, 1)])  # one row: no update at all
def test_cumulative_sum(shape):
    X, _, _, res = _cumsum()
    s = te.create_schedule(res.op)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")
    np.testing.assert_allclose(_run(s, [X, res], [x], shape), np.cumsum(x, axis=0), rtol=1e-5)


def test_scheduled_update_and_consumer():
    X, init, update, res = _cumsum()
    Y = te.compute(X.shape, lambda t, i: res[t, i] * 2.0, name="Y")
    s = te.create_schedule(Y.op)
    xo, xi = s[update].split(update.op.axis[1], factor=4)
    s[update].vectorize(xi)
    s[init].split(init.op.axis[1], factor=3)
    x = np.random.default_rng(1).uniform(-1, 1, (9, 11)).astype("float32")
    got = _run(s, [X, Y], [x], x.shape)
    np.testing.assert_allclose(got, 2 * np.cumsum(x, axis=0), rtol=1e-5)


def test_two_dimensional_state_with_two_init_rows():
    T, n, k = 10, 6, 3
    X = te.placeholder((T, n, k), name="X")
    state = te.placeholder((T, n, k), name="state")
    init = te.compute((2, n, k), lambda t, i, j: X[t, i, j], name="init")
    update = te.compute(
        (T, n, k),
        lambda t, i, j: state[t - 1, i, j] * 0.5 + state[t - 2, (i + 1) % n, j] + X[t, i, j],
        name="update",
    )
    res = te.scan(init, update, state, inputs=[X])
    s = te.create_schedule(res.op)
    x = np.random.default_rng(2).uniform(-1, 1, (T, n, k)).astype("float32")
    want = x.copy()
    for t in range(2, T):
        want[t] = want[t - 1] * 0.5 + np.roll(want[t - 2], -1, axis=0) + x[t]
    np.testing.assert_allclose(_run(s, [X, res], [x], x.shape), want, rtol=1e-5)


def test_multi_stage_update_computed_inside_the_scan():
    m, n = 8, 21
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    s1 = te.compute((m, n), lambda t, i: state[t - 1, i] * 2.0, name="s1")
    s2 = te.compute((m, n), lambda t, i: s1[t, i] + X[t, i], name="s2")
    res = te.scan(init, s2, state, inputs=[X])
    x = np.random.default_rng(3).uniform(-1, 1, (m, n)).astype("float32")
    want = x.copy()
    for t in range(1, m):
        want[t] = 2 * want[t - 1] + x[t]
    for attach in (False, True):
        s = te.create_schedule(res.op)
        if attach:
            xo, xi = s[s2].split(s2.op.axis[1], factor=8)
            s[s1].compute_at(s[s2], xo)
        np.testing.assert_allclose(_run(s, [X, res], [x], x.shape), want, rtol=1e-5)


def test_placeholder_init_is_copied_in():
    m, n = 6, 4
    X = te.placeholder((m, n), name="X")
    X0 = te.placeholder((1, n), name="X0")
    state = te.placeholder((m, n), name="state")
    update = te.compute((m, n), lambda t, i: te.max(state[t - 1, i], X[t, i]), name="update")
    res = te.scan(X0, update, state)
    s = te.create_schedule(res.op)
    rng = np.random.default_rng(4)
    x, x0 = rng.uniform(-1, 1, (m, n)).astype("float32"), rng.uniform(-1, 1, (1, n))
    x0 = x0.astype("float32")
    got = _run(s, [X, X0, res], [x, x0], (m, n))
    np.testing.assert_allclose(got, np.maximum.accumulate(np.vstack([x0, x[1:]]), axis=0))


def test_reading_the_current_row_is_refused():
    m, n = 5, 3
    X = te.placeholder((m, n), name="X")
    state = te.placeholder((m, n), name="state")
    init = te.compute((1, n), lambda _, i: X[0, i], name="init")
    update = te.compute((m, n), lambda t, i: state[t, i] + X[t, i], name="update")
    with pytest.raises(tf.ExprError, match="reads state 'state' at row t, which is not computed"):
        te.scan(init, update, state)


def test_inlining_the_init_is_refused():
    X, init, _, res = _cumsum()
    s = te.create_schedule(res.op)
    s[init].compute_inline()
    with pytest.raises(tf.ScheduleError, match="'init' is inlined, but 'cumsum'"):
        tf.lower(s, [X, res])


def test_shape_mismatch_is_refused():
    state = te.placeholder((5, 3), name="state")
    init = te.compute((1, 4), lambda _, i: 0.0, name="init")
    update = te.compute((5, 3), lambda t, i: state[t - 1, i], name="update")
    with pytest.raises(tf.ExprError, match="init 'init' has shape"):
        te.scan(init, update, state)


def test_auto_inline_keeps_what_a_scan_reads():
    X, init, update, res = _cumsum()
    Y = te.compute(X.shape, lambda t, i: res[t, i] + 1.0, name="Y")
    s = te.create_schedule(Y.op)
    tf.schedule.auto_inline(s)
    assert s[init].attach_type == "root"
    x = np.random.default_rng(6).uniform(-1, 1, (4, 3)).astype("float32")
    np.testing.assert_allclose(_run(s, [X, Y], [x], x.shape), np.cumsum(x, 0) + 1, rtol=1e-5)
