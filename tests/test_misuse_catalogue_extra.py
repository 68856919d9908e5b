"""More user mistakes (beyond test_misuse_catalogue.py): each gets a tensorforge error, of the
matching built-in type, whose message names the user's own objects."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te


def chain():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((10,), lambda i: A[i] - 1.0, name="D")
    return A, B, C, D


def matmul(n=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C, k


# -- te -----------------------------------------------------------------------------------------


def test_truth_value_of_expression():
    A = te.placeholder((3,), name="A")
    with pytest.raises(TypeError, match=r"truth value of expression A\[0\] > 1.0"):
        if A[0] > 1.0:
            pass


def test_integer_true_division_points_to_floordiv():
    i = te.var("i")
    with pytest.raises(tf.ExprError, match=r"'/' of integer expressions i and 2.*use '//'"):
        i / 2


def test_negative_shape():
    with pytest.raises(
        tf.ExprError, match=r"placeholder 'P': shape entries must be non-negative, got -1"
    ):
        te.placeholder((-1,), name="P")


def test_float_shape():
    with pytest.raises(
        tf.ExprError, match=r"placeholder 'P': shape entries must be integers, got 2.5"
    ):
        te.placeholder((2.5,), name="P")


def test_reduce_axis_bad_domain():
    with pytest.raises(
        tf.ExprError, match=r"reduce_axis 'r': dom must be a \(lo, hi\) pair, got 5"
    ):
        te.reduce_axis(5, name="r")


def test_unknown_thread_tag():
    with pytest.raises(tf.ExprError, match=r"unknown tag 'blockIdx.w'"):
        te.thread_axis("blockIdx.w")


def test_var_unknown_dtype():
    with pytest.raises(tf.ExprError, match=r"var 'n': unknown dtype 'float7'"):
        te.var("n", "float7")


def test_mixed_reduction_and_elementwise_outputs():
    A = te.placeholder((3, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    with pytest.raises(
        tf.ExprError, match=r"compute 'M': cannot mix reduction and non-reduction outputs"
    ):
        te.compute((3,), lambda i: (te.sum(A[i, k], axis=k), A[i, 0]), name="M")


def test_where_not_boolean():
    A = te.placeholder((3, 3), name="A")
    k = te.reduce_axis((0, 3), name="k")
    with pytest.raises(tf.ExprError, match=r"sum: where= must be a boolean expression, got k \+ 1"):
        te.compute((3,), lambda i: te.sum(A[i, k], axis=k, where=k + 1), name="M")


def test_reduce_over_a_data_axis():
    A = te.placeholder((3, 3), name="A")
    with pytest.raises(tf.ExprError, match=r"sum: axis i is not a te.reduce_axis"):
        te.compute((3,), lambda i: te.sum(A[i, 0], axis=i), name="M")


def test_if_then_else_condition_not_boolean():
    A = te.placeholder((3,), name="A")
    with pytest.raises(
        tf.ExprError, match=r"if_then_else: condition A\[0\] must be boolean, not float32"
    ):
        te.if_then_else(A[0], 1.0, 2.0)


def test_max_of_one_expression_without_axis():
    A = te.placeholder((3,), name="A")
    with pytest.raises(tf.ExprError, match=r"te.max: give a reduction axis, or two expressions"):
        te.max(A[0])


def test_whole_tensor_used_as_a_value():
    A = te.placeholder((3,), name="A")
    with pytest.raises(tf.ExprError, match=r"Tensor\(A"):
        te.compute((3,), lambda i: A[i] + A, name="X")


def test_lossy_implicit_dtype_mix():
    a, b = te.var("a", "int64"), te.var("b", "float16")
    with pytest.raises(tf.ExprError, match=r"cannot mix int64 and float16 implicitly"):
        a + b


def test_string_index():
    A = te.placeholder((3,), name="A")
    with pytest.raises(tf.ExprError, match=r"tensor 'A'"):
        A["x"]


def test_fcompute_returns_a_string():
    with pytest.raises(tf.ExprError, match=r"compute 'S'"):
        te.compute((3,), lambda i: "x", name="S")


def test_compute_shape_is_a_string():
    with pytest.raises(tf.ExprError, match=r"compute 'S'.*shape"):
        te.compute("abc", lambda i: i, name="S")


# -- schedule -------------------------------------------------------------------------------------


def test_tile_a_split_axis():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].split(i, factor=2)
    with pytest.raises(
        tf.ScheduleError, match=r"'i' is not a leaf axis of stage 'C' \(it was already split"
    ):
        s[C].tile(i, j, 2, 2)


def test_reorder_axis_of_another_stage():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(
        tf.ScheduleError,
        match=r"reorder: 'i' is not a leaf axis of stage 'C' \(it belongs to another stage\)",
    ):
        s[C].reorder(C.op.axis[0], D.op.axis[0])


def test_compute_at_given_a_tensor_not_a_stage():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"compute_at of 'B': parent must be a Stage \(s\[T\]\), got Tensor\(C",
    ):
        s[B].compute_at(C, C.op.axis[0])


def test_compute_at_of_an_output():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, B.op])
    with pytest.raises(tf.ScheduleError, match=r"compute_at: 'B' is an output of the schedule"):
        s[B].compute_at(s[C], C.op.axis[0])


def test_compute_at_a_reduction_axis_of_another_stage():
    A, B, C, k = matmul()
    D = te.compute((16, 16), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"compute_at of 'C': 'k' is not a leaf axis of stage 'D'; its leaf axes are: i, j",
    ):
        s[C].compute_at(s[D], k)


def test_compute_at_with_a_consumer_left_outside():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((10,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(tf.ScheduleError, match=r"'B' is computed inside 'C' .* also read by 'D'"):
        tf.lower(s, [A, D])


def test_compute_at_deeper_than_another_consumer():
    A = te.placeholder((4, 4), name="A")
    E = te.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="E")
    k = te.reduce_axis((0, 4), name="k")
    S = te.compute((4,), lambda i: te.sum(E[i, k], axis=k), name="S")
    D = te.compute((4, 4), lambda i, j: E[i, j] / S[i], name="D")
    s = te.create_schedule(D.op)
    s[S].compute_at(s[D], D.op.axis[0])
    s[E].compute_at(s[D], D.op.axis[1])  # S reads E at D's i loop, outside j
    with pytest.raises(tf.ScheduleError, match=r"'E'.*'S'"):
        tf.lower(s, [A, D])


def test_compute_inline_of_multi_output_stage():
    A = te.placeholder((3,), name="A")
    P, Q = te.compute((3,), lambda i: (A[i] + 1.0, A[i] * 2.0), name="PQ")
    D = te.compute((3,), lambda i: P[i] + Q[i], name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(tf.ScheduleError, match=r"compute_inline: 'PQ' has several outputs"):
        s[P].compute_inline()


def test_compute_inline_with_stages_attached():
    A, B, C, D = chain()
    E = te.compute((10,), lambda i: C[i] + 1.0, name="E")
    s = te.create_schedule(E.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(
        tf.ScheduleError, match=r"compute_inline: stages B are computed at 'C'; move them first"
    ):
        s[C].compute_inline()


def test_cache_read_for_a_stage_that_does_not_read():
    A, B, C, D = chain()
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(
        tf.ScheduleError, match=r"cache_read: 'D' does not read 'B' \(it is read by: C\)"
    ):
        s.cache_read(B, "local", [D])


def test_cache_read_without_readers():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"cache_read of 'A': give at least one reader"):
        s.cache_read(A, "local", [])


def test_cache_read_unknown_scope():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"cache_read of 'A': unknown scope 'texture'"):
        s.cache_read(A, "texture", [B])


def test_cache_write_after_split():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(
        tf.ScheduleError, match=r"cache_write of 'C': call cache_write before splitting"
    ):
        s.cache_write(C, "local")


def test_cache_write_of_a_placeholder():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"cache_write: 'A' is a placeholder"):
        s.cache_write(A, "local")


def test_rfactor_of_an_elementwise_stage():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"rfactor: 'C' is not a reduction"):
        s.rfactor(C, C.op.axis[0])


def test_rfactor_of_a_spatial_axis():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"rfactor: 'i' of stage 'C' is not a reduction axis; reduction axes are: k",
    ):
        s.rfactor(C, C.op.axis[0])


def test_rfactor_factor_axis_out_of_range():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"rfactor of 'C': factor_axis must be in \[0, 2\]"):
        s.rfactor(C, k, factor_axis=5)


def test_storage_align_axis_of_another_stage():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError, match=r"storage_align: 'i' is not a data axis of stage 'B'"
    ):
        s[B].storage_align(C.op.axis[0], 4, 0)


def test_set_scope_of_an_output():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError, match=r"set_scope: 'C' is an output; outputs live in global memory"
    ):
        s[C].set_scope("local")


def test_unroll_a_parallel_axis():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    with pytest.raises(
        tf.ScheduleError, match=r"unroll: axis 'i' of stage 'C' is already parallel"
    ):
        s[C].unroll(C.op.axis[0])


def test_vectorize_a_reduction_axis_of_a_cache_stage():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    with pytest.raises(
        tf.ScheduleError, match=r"vectorize: 'k.c' of stage 'C.local' is a reduction axis"
    ):
        s[CC].vectorize(s[CC].op.reduce_axis[0])


def test_split_nparts_zero():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError, match=r"split of 'i' in stage 'C': nparts must be >= 1, got 0"
    ):
        s[C].split(C.op.axis[0], nparts=0)


def test_split_factor_is_a_string():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"split of 'i' in stage 'C'"):
        s[C].split(C.op.axis[0], factor="4")


def test_fuse_nothing():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"fuse in stage 'C': give at least one axis"):
        s[C].fuse()


def test_bind_reduction_axis_to_a_block_index():
    A, B, C, k = matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"bind: reduction axis 'k' of stage 'C' can only be bound to a threadIdx",
    ):
        s[C].bind(k, te.thread_axis("blockIdx.x"))


def test_pragma_on_a_split_axis():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    i = C.op.axis[0]
    s[C].split(i, factor=2)
    with pytest.raises(tf.ScheduleError, match=r"pragma: 'i' is not a leaf axis of stage 'C'"):
        s[C].pragma(i, "unroll_explicit")


def test_create_schedule_of_nothing():
    with pytest.raises(tf.ScheduleError, match=r"create_schedule: give at least one output"):
        te.create_schedule([])


def test_create_schedule_of_a_number():
    with pytest.raises(tf.ScheduleError, match=r"expected a Tensor or Operation, got 3"):
        te.create_schedule(3)


# -- lower / build ------------------------------------------------------------------------------------


def test_lower_a_tensor_instead_of_a_schedule():
    A, B, C, D = chain()
    with pytest.raises(tf.ArgumentError, match=r"lower: expected a Schedule .*got Tensor"):
        tf.lower(C, [A, C])


def test_lower_args_not_a_list():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ArgumentError, match=r"lower: args must be a list"):
        tf.lower(s, C)


def test_lower_tensor_twice_in_args():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ScheduleError, match=r"lower: tensor 'A' appears twice in args"):
        tf.lower(s, [A, C, A])


def test_build_schedule_without_args():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.ArgumentError, match=r"build: pass args"):
        tf.build(s)


def test_scalar_var_not_in_args():
    alpha = te.var("alpha", "float32")
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * alpha, name="B")
    s = te.create_schedule(B.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"variable 'alpha' is used but is neither a loop variable nor an argument",
    ):
        tf.lower(s, [A, B])


def test_build_unknown_target_kind():
    A, B, C, D = chain()
    s = te.create_schedule(C.op)
    with pytest.raises(tf.TargetError, match=r"Target 'opencl': unknown kind 'opencl'"):
        tf.build(s, [A, C], target="opencl")


def test_target_unknown_cpu():
    with pytest.raises(tf.TargetError, match=r"nonsense_cpu"):
        tf.Target("llvm -mcpu=nonsense_cpu")


def test_unknown_device_kind():
    with pytest.raises(tf.ArgumentError, match=r"unknown device kind 'tpu'"):
        tf.device("tpu", 0)


def test_nd_empty_unknown_dtype():
    with pytest.raises(tf.ArgumentError, match=r"tf.nd.empty: unsupported dtype 'float8'"):
        tf.nd.empty((3,), "float8", tf.cpu(0))


def test_nd_array_of_a_ragged_list():
    with pytest.raises(tf.TensorForgeError):
        tf.nd.array([[1, 2], [3]], tf.cpu(0))


def test_load_module_missing_file():
    with pytest.raises(tf.ArgumentError, match=r"load_module: no such file: /nonexistent_dir/x.so"):
        tf.runtime.load_module("/nonexistent_dir/x.so")


# -- call -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def add_module():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    return tf.build(te.create_schedule(B.op), [A, B])


def test_call_with_a_list(add_module):
    with pytest.raises(tf.ArgumentError, match=r"argument 'A' expects an array .*got list"):
        add_module([1.0] * 8, np.zeros(8, "float32"))


def test_call_with_none(add_module):
    with pytest.raises(tf.ArgumentError, match=r"argument 'A' expects an array .*got NoneType"):
        add_module(None, np.zeros(8, "float32"))


def test_call_with_a_read_only_output(add_module):
    b = np.zeros(8, "float32")
    b.flags.writeable = False
    with pytest.raises(tf.ArgumentError, match=r"argument 'B' is read-only"):
        add_module(np.ones(8, "float32"), b)


def test_call_too_many_arguments(add_module):
    with pytest.raises(tf.ArgumentError, match=r"main\(\) takes 2 argument\(s\) \(A, B\), got 3"):
        add_module(np.ones(8, "float32"), np.zeros(8, "float32"), np.zeros(8, "float32"))


def test_call_an_unknown_function(add_module):
    with pytest.raises(tf.ArgumentError, match=r"no function 'nope'; it has: main"):
        add_module["nope"]


def test_time_evaluator_with_a_string_device(add_module):
    with pytest.raises(tf.ArgumentError, match=r"time_evaluator: dev must be a Device .*got 'cpu'"):
        add_module.time_evaluator("main", "cpu")


def test_get_source_unknown_format(add_module):
    with pytest.raises(
        tf.ArgumentError, match=r"get_source: unknown format 'ptx' for a llvm module"
    ):
        add_module.get_source("ptx")


def test_call_scalar_with_a_string():
    alpha = te.var("alpha", "float32")
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * alpha, name="B")
    mod = tf.build(te.create_schedule(B.op), [A, B, alpha])
    with pytest.raises(
        tf.ArgumentError,
        match=r"argument 'alpha' is a float32 scalar and expects a number, got str",
    ):
        mod(np.ones(4, "float32"), np.ones(4, "float32"), "x")


def test_call_with_inconsistent_symbolic_sizes():
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    mod = tf.build(te.create_schedule(B.op), [A, B])
    with pytest.raises(tf.ArgumentError, match=r"argument 'B' has shape \(6,\).*n is 5 from 'A'"):
        mod(np.ones(5, "float32"), np.ones(6, "float32"))


def test_call_with_a_fortran_ordered_array():
    A = te.placeholder((3, 4), name="A")
    B = te.compute((3, 4), lambda i, j: A[i, j] + 1.0, name="B")
    mod = tf.build(te.create_schedule(B.op), [A, B])
    with pytest.raises(tf.ArgumentError, match=r"argument 'A' is not C-contiguous"):
        mod(np.asfortranarray(np.ones((3, 4), "float32")), np.ones((3, 4), "float32"))
