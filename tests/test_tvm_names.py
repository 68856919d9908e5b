"""TVM's names (API.md §7): the ones tensorforge provides work, the others say what to use."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.tvm_names import MissingNameError


@pytest.mark.parametrize(
    "module, name, advice",
    [
        (tf, "relay", "te.compute"),
        (tf, "transform", "pipeline"),
        (tf, "rpc", "LocalRunner"),
        (tf, "autotvm", "tensorforge.tune"),
        (tf, "auto_scheduler", "tune.auto"),
        (tf, "topi", "tensorforge.ops"),
        (tf, "contrib", "export_library"),
        (tf, "IRModule", "PrimFunc"),
        (tf, "placeholder", "te.placeholder"),
        (te, "hybrid", "te.compute"),
        (te, "ldexp", "call_pure_extern"),
        (te, "create_prim_func", "tf.lower"),
        (tf.tir, "transform", "trace=True"),
        (tf.tir, "Schedule", "te.create_schedule"),
        (tune, "RPCRunner", "LocalRunner"),
        (tune, "record", "load_records"),
        (tune.tuner, "GATuner", "XGBTuner"),
        (tune.task, "extract_from_program", "tune.task.create"),
    ],
)
def test_a_missing_tvm_name_says_what_to_use(module, name, advice):
    with pytest.raises(MissingNameError) as info:
        getattr(module, name)
    message = str(info.value)
    assert "does not provide" in message and advice in message
    assert not hasattr(module, name)  # an AttributeError too: hasattr keeps working


def test_a_misspelt_name_suggests_the_close_ones():
    with pytest.raises(MissingNameError, match="did you mean placeholder"):
        te.placehodler  # noqa: B018
    with pytest.raises(AttributeError):  # dunders stay plain for Python's machinery
        te.__wrapped__  # noqa: B018


def test_min_and_max_value():
    assert te.min_value("float32").value == float(np.finfo(np.float32).min)
    assert te.max_value("int8").value == 127 and te.max_value("int8").dtype == "int8"
    assert te.min_value("uint16").value == 0
    assert te.max_value("bool").value is True
    # as a reduction identity: the max of all-negative data
    n = 37
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    init = te.min_value("float32")
    M = te.compute((1,), lambda _: te.max(A[k], axis=k), name="M")
    C = te.compute((n,), lambda i: te.if_then_else(A[i] > init, A[i], init), name="C")
    s = te.create_schedule([M.op, C.op])
    f = tf.build(s, [A, M, C])
    a = -np.random.default_rng(0).uniform(1, 2, n).astype("float32")
    m, c = tf.nd.empty((1,), "float32"), tf.nd.empty((n,), "float32")
    f(tf.nd.array(a), m, c)
    tf.testing.assert_allclose(m, [a.max()])
    tf.testing.assert_allclose(c.numpy(), a)


def test_tir_names_build_and_run():
    n = 29
    A = te.placeholder((n,), name="A")
    B = te.compute(
        (n,),
        lambda i: tf.tir.Select(
            A[i] > tf.tir.const(0.0, "float32"),
            A[i] * 2.0,
            tf.tir.if_then_else(i % 2 == 0, A[i], tf.tir.const(-1.0)),
        ),
        name="B",
    )
    C = te.compute((n,), lambda i: tf.tir.call_pure_extern("float32", "expf", B[i]), name="C")
    s = te.create_schedule(C.op)
    text = str(tf.lower(s, [A, C], simple_mode=True))
    assert "expf" in text
    f = tf.build(s, [A, C])
    a = np.random.default_rng(1).uniform(-1, 1, n).astype("float32")
    c = tf.nd.empty((n,), "float32")
    f(tf.nd.array(a), c)
    b = np.where(a > 0, 2 * a, np.where(np.arange(n) % 2 == 0, a, -1.0))
    tf.testing.assert_allclose(c, np.exp(b).astype("float32"), rtol=1e-6)


def test_assert_allclose_reports_the_difference():
    tf.testing.assert_allclose(tf.nd.array(np.ones(3, "float32")), np.ones(3))
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 3"):
        tf.testing.assert_allclose(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.5]))
    with pytest.raises(AssertionError, match="shapes differ"):
        tf.testing.assert_allclose(np.ones((3, 1)), np.ones(3))


def test_module_save_and_load(tmp_path):
    n = 19
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    mod = tf.build(te.create_schedule(B.op), [A, B], name="addone")
    mod.save(tmp_path / "addone.ll")
    assert "define" in (tmp_path / "addone.ll").read_text()
    mod.save(str(tmp_path / "addone.s"))
    mod.save(str(tmp_path / "addone.o"))
    assert (tmp_path / "addone.o").read_bytes()[:4] == b"\x7fELF"
    mod.save(str(tmp_path / "addone.so"))
    loaded = tf.runtime.load_module(str(tmp_path / "addone.so"))
    a = np.random.default_rng(2).uniform(size=n).astype("float32")
    b = tf.nd.empty((n,), "float32")
    loaded(tf.nd.array(a), b)
    tf.testing.assert_allclose(b, a + 1)
    with pytest.raises(tf.ArgumentError, match="unknown format 'txt'"):
        mod.save(str(tmp_path / "addone.txt"))
    with pytest.raises(tf.ArgumentError, match="cuda format"):
        mod.save(str(tmp_path / "addone.cu"))


def test_llvm_pure_intrin_in_a_compute():
    n = 23
    A = te.placeholder((n,), name="A")
    B = te.compute(
        (n,), lambda i: tf.tir.call_llvm_pure_intrin("float32", "llvm.fma.f32", 3, A[i], 2.0, 1.0)
    )
    f = tf.build(te.create_schedule(B.op), [A, B])
    a = np.random.default_rng(4).uniform(size=n).astype("float32")
    b = tf.nd.empty((n,), "float32")
    f(tf.nd.array(a), b)
    tf.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)
