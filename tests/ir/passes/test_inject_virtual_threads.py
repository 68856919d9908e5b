"""inject_virtual_threads: vthread loops become interleaved copies with per-copy local storage."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.errors import LoweringError
from tensorforge.ir.passes.inject_virtual_threads import inject_virtual_threads
from tensorforge.ir.stmt import Allocate, For, IfThenElse, LoopKind, Seq, Sync
from tensorforge.te.expr import LT, Add, Mul, Var
from tests.ir.builders import buf, c, f32, load, loop, store

A, B = buf("A", 64), buf("B", 64)
S = buf("S", 16, scope="shared")
ACC = buf("acc", 4, scope="local")


def vthread(var, extent, body):
    return For(var, c(0), c(extent), body, LoopKind.THREAD_BINDING, "vthread")


def test_independent_statements_run_once_dependent_ones_per_copy():
    v, i = Var("v"), Var("i")
    fill = loop(i, 16, store(S, i, load(A, i)))
    use = store(B, v, load(S, v))
    out = inject_virtual_threads(vthread(v, 3, Seq((fill, Sync(), use))))
    copies = tuple(store(B, c(k), load(S, c(k))) for k in range(3))
    assert out == Seq((fill, Sync(), *copies))


def test_local_storage_gets_one_copy_per_virtual_thread():
    v, i = Var("v"), Var("i")
    body = Allocate(ACC, c(4), loop(i, 4, store(ACC, i, f32(0))))
    out = inject_virtual_threads(vthread(v, 2, body))
    assert out == Allocate(
        ACC,
        Mul(c(4), c(2)),
        loop(i, 4, Seq(tuple(store(ACC, Add(i, Mul(c(k), c(4))), f32(0)) for k in range(2)))),
    )


def test_shared_storage_is_not_copied():
    v = Var("v")
    out = inject_virtual_threads(vthread(v, 2, Allocate(S, c(16), store(S, v, f32(1)))))
    assert out == Allocate(S, c(16), Seq((store(S, c(0), f32(1)), store(S, c(1), f32(1)))))


def test_guard_on_the_vthread_is_copied_whole():
    v = Var("v")
    guarded = IfThenElse(LT(v, c(1)), store(B, v, f32(2)))
    out = inject_virtual_threads(vthread(v, 2, guarded))
    assert out == Seq(
        (IfThenElse(LT(c(0), c(1)), store(B, c(0), f32(2))),)
        + (IfThenElse(LT(c(1), c(1)), store(B, c(1), f32(2))),)
    )


def test_barrier_under_vthread_dependent_control_is_refused():
    v = Var("vx")
    body = IfThenElse(LT(v, c(1)), Seq((Sync(), store(B, v, f32(2)))))
    with pytest.raises(LoweringError, match="'vx'"):
        inject_virtual_threads(vthread(v, 2, body))


def test_symbolic_extent_is_refused():
    v, n = Var("vy"), Var("n")
    with pytest.raises(LoweringError, match="'vy'.*constant"):
        inject_virtual_threads(
            For(v, c(0), n, store(B, v, f32(0)), LoopKind.THREAD_BINDING, "vthread")
        )


@pytest.mark.parametrize("n, m", [(37, 24), (1, 1), (13, 7)])
def test_vthreads_with_a_cache_inside_match_numpy_on_the_cpu(n, m, rng):
    X = te.placeholder((n, m), name="X")
    Y = te.compute((n, m), lambda i, j: X[i, j] * 2, name="Y")
    Z = te.compute((n, m), lambda i, j: Y[i, j] + X[i, j], name="Z")
    s = te.create_schedule(Z.op)
    vo, ii = s[Z].split(s[Z].op.axis[0], nparts=3)
    vj, jj = s[Z].split(s[Z].op.axis[1], nparts=2)
    s[Z].reorder(vo, vj, ii, jj)
    s[Z].bind(vo, te.thread_axis("vthread"))
    s[Z].bind(vj, te.thread_axis((0, 2), "vthread", name="vx"))
    s[Y].compute_at(s[Z], vj)
    f = tf.build(s, [X, Z])
    x = rng.standard_normal((n, m)).astype("float32")
    z = np.zeros_like(x)
    f(x, z)
    np.testing.assert_allclose(z, 3 * x, rtol=1e-6)
