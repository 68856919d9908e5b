"""tir.ir_builder programs as te.extern stage bodies, against NumPy on the CPU (LLVM and C), their
CUDA kernels through nvcc, and the builder's errors."""

import shutil

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te


def build_and_run(out_shape, inputs, arrays, fcompute, target="llvm", dtype=None, args=()):
    placeholders = [te.placeholder(a.shape, name=f"in{k}", dtype=str(a.dtype)) for k, a in enumerate(arrays)]  # fmt: skip
    out = te.extern(out_shape, placeholders, fcompute, name="out", dtype=dtype)
    f = tf.build(te.create_schedule(out.op), [*placeholders, out, *args], target=target)
    result = tf.nd.array(np.full(out_shape, 7, dtype or arrays[0].dtype))
    f(*[tf.nd.array(a) for a in arrays], result)
    return result.numpy()


def prefix_sum(ins, outs):
    """Row-wise inclusive prefix sum: nested loops, a local accumulator, n-d and flat indices."""
    ib = tf.tir.ir_builder.create()
    rows, cols = ins[0].shape
    data, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    with ib.for_range(0, rows, name="i", kind="parallel") as i:
        acc = ib.allocate("float32", (1,), name="acc", scope="local")
        acc[0] = 0.0
        with ib.for_range(0, cols, name="j") as j:
            acc[0] = acc[0] + data[i, j]
            out[i * cols + j] = acc[0]
    return ib.get()


@pytest.mark.parametrize("target", ["llvm", "c"])
@pytest.mark.parametrize("shape", [(7, 13), (1, 1)])
def test_prefix_sum_matches_numpy(target, shape):
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    got = build_and_run(shape, None, [x], prefix_sum, target)
    np.testing.assert_allclose(got, np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)


def scatter_rows(ins, outs):
    """out = data; out[index[k], :] += updates[k, :] (a tutorial scatter_add over rows)."""
    ib = tf.tir.ir_builder.create()
    data, index, updates = (ib.buffer_ptr(b) for b in ins)
    out = ib.buffer_ptr(outs[0])
    n, m = ins[0].shape
    with ib.for_range(0, n * m, name="i", kind="parallel") as i:
        out[i] = data[i]
    with ib.for_range(0, ins[1].shape[0], name="k") as k:
        row = ib.let("row", index[k])
        with ib.if_scope(tf.tir.all(row >= 0, row < n)):
            with ib.for_range(0, m, name="c", kind="vectorize" if m % 4 == 0 else "unroll") as c:
                out[row, c] = out[row, c] + updates[k, c]
    return ib.get()


@pytest.mark.parametrize("m", [8, 3])
def test_scatter_rows_matches_numpy(m):
    rng = np.random.default_rng(m)
    data = rng.standard_normal((5, m)).astype("float32")
    index = np.array([4, 0, 4, 9, 2, -1, 4], "int32")  # duplicates; 9 and -1 are skipped
    updates = rng.standard_normal((7, m)).astype("float32")
    got = build_and_run((5, m), None, [data, index, updates], scatter_rows)
    want = data.copy()
    for k, row in enumerate(index):
        if 0 <= row < 5:
            want[row] += updates[k]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_if_else_while_let_and_new_scope():
    def fcompute(ins, outs):
        ib = tf.tir.ir_builder.create()
        x, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, ins[0].shape[0]) as i:
            with ib.new_scope():
                steps = ib.allocate("int32", 1, name="steps")
                value = ib.let("value", x[i])
                steps[0] = 0
                with ib.while_loop(steps[0] * steps[0] < value):  # ceil(sqrt(value))
                    steps[0] = steps[0] + 1
                with ib.if_scope(value % 2 == 0):
                    out[i] = steps[0]
                with ib.else_scope():
                    out[i] = -steps[0]
        return ib.get()

    x = np.array([0, 1, 4, 5, 17, 100, 99], "int32")
    got = build_and_run(x.shape, None, [x], fcompute)
    steps = np.ceil(np.sqrt(x)).astype("int32")
    np.testing.assert_array_equal(got, np.where(x % 2 == 0, steps, -steps))


def test_loop_names_and_printed_ir():
    def fcompute(ins, outs):
        ib = tf.tir.ir_builder.create()
        out = ib.buffer_ptr(outs[0])
        with ib.for_range(0, 2) as i:
            with ib.for_range(0, 3) as j:
                out[i, j] = (i * 3 + j).astype("float32")
        return ib.get()

    A = te.placeholder((2, 3), name="A")
    B = te.extern((2, 3), [A], fcompute, name="B")
    text = str(tf.lower(te.create_schedule(B.op), [A, B]))
    assert "for i in range(2)" in text and "for j in range(3)" in text, text
    got = build_and_run((2, 3), None, [np.zeros((2, 3), "float32")], fcompute)
    np.testing.assert_array_equal(got, np.arange(6, dtype="float32").reshape(2, 3))


def gpu_square(ins, outs):
    """One thread per element: block and thread axes, a shared tile, a guard for the tail."""
    ib = tf.tir.ir_builder.create()
    n = ins[0].shape[0]
    x, out = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
    bx, tx = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
    ib.scope_attr(bx, "thread_extent", (n + 63) // 64)
    ib.scope_attr(tx, "thread_extent", 64)
    tile = ib.allocate("float32", (64,), name="tile", scope="shared")
    index = ib.let("index", bx * 64 + tx)
    with ib.if_scope(ib.likely(index < n)):
        tile[tx] = x[index]
        out[index] = tile[tx] * tile[tx]
    return ib.get()


def gpu_module(n=1001):
    X = te.placeholder((n,), name="X")
    Y = te.extern((n,), [X], gpu_square, name="Y")
    return tf.build(te.create_schedule(Y.op), [X, Y], target="cuda")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_kernel_with_thread_extents_compiles_with_nvcc():
    from tests.graph.graph_fuzz_nvcc import nvcc_errors

    module = gpu_module()
    source = module.get_source("cuda")
    assert "__shared__" in source and "blockIdx" in source, source
    assert nvcc_errors([module], "sm_90a") is None


@pytest.mark.cuda
def test_cuda_kernel_with_thread_extents_runs():
    n = 1001
    module = gpu_module(n)
    x = np.random.default_rng(1).standard_normal(n).astype("float32")
    dev = tf.cuda(0)
    y = tf.nd.empty((n,), "float32", dev)
    module(tf.nd.array(x, dev), y)
    np.testing.assert_allclose(y.numpy(), x * x, rtol=1e-6)


def test_calls_still_collect_for_tensor_intrinsics():
    def fintrin(ins, outs):
        ib = tf.tir.ir_builder.create()
        ib.emit(tf.tir.call_extern("int32", "noop", outs[0].access_ptr("w")))
        return ib.get()

    from tensorforge.te.extern_call import as_call_list

    assert len(as_call_list(fintrin([], [tf.tir.decl_buffer((4,), name="o")]), "test")) == 1


def test_errors_name_the_buffer():
    A = te.placeholder((4,), name="A")

    def wrong_dtype(ins, outs):
        ib = tf.tir.ir_builder.create()
        out = ib.buffer_ptr(outs[0])
        out[0] = te.const(1, "int32")
        return ib.get()

    with pytest.raises(tf.ExprError, match="into 'E'.*holds float32"):
        te.extern((4,), [A], wrong_dtype, name="E")

    other = tf.tir.ir_builder.create()
    stranger = other.allocate("float32", 4, name="stranger")

    def foreign_buffer(ins, outs):
        ib = tf.tir.ir_builder.create()
        ib.buffer_ptr(outs[0])[0] = stranger[1]
        return ib.get()

    with pytest.raises(tf.ExprError, match="'stranger' was allocated by another ir_builder"):
        te.extern((4,), [A], foreign_buffer, name="E")

    with pytest.raises(tf.ExprError, match="'stranger' belongs to another ir_builder"):
        tf.tir.ir_builder.create().buffer_ptr(stranger)

    def unknown_buffer(ins, outs):
        ib = tf.tir.ir_builder.create()
        ib.buffer_ptr(outs[0])[0] = ib.buffer_ptr(tf.tir.decl_buffer((4,), name="nowhere"))[0]
        return ib.get()

    E = te.extern((4,), [A], unknown_buffer, name="E")
    with pytest.raises(tf.ScheduleError, match="uses buffer 'nowhere'"):
        tf.lower(te.create_schedule(E.op), [A, E])

    ib = tf.tir.ir_builder.create()
    with pytest.raises(tf.ExprError, match="else_scope must follow an if_scope"):
        ib.else_scope()
    with pytest.raises(tf.ExprError, match="unknown kind 'fast'"):
        ib.for_range(0, 4, kind="fast")
    with pytest.raises(tf.ExprError, match="'buf' has 1 dimensions, indexed with 2"):
        ib.allocate("float32", 4)[1, 2]
    with pytest.raises(tf.ExprError, match="not bool"):
        ib.if_scope(te.const(1))
