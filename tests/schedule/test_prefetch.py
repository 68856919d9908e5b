"""Stage.prefetch: cache hints for the region a later iteration reads."""

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import te
from tensorforge.ir.stmt import Prefetch
from tensorforge.ir.visit import walk
from tensorforge.testing import check_against_numpy


def scaled(n, m):
    A = te.placeholder((n, m), name="A")
    B = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    return A, B


def prefetches(s, args):
    return [n for n in walk(tf.lower(s, args).body) if isinstance(n, Prefetch)]


def test_prefetch_inside_a_vectorized_row_is_correct_and_lowers_to_prefetch_instructions():
    A, B = scaled(7, 101)  # odd sizes: a peeled tail of j, the last rows prefetch past the end
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=8)
    s[B].vectorize(ji)
    s[B].prefetch(A, jo, 32)
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1)
    found = prefetches(s, [A, B])
    assert found and all(p.buffer.name == "A" for p in found)
    mod = tf.build(s, [A, B])
    assert "llvm.prefetch" in mod.get_source("ll")
    assert "prefetch" in mod.get_source("asm")


def test_prefetch_of_the_next_row_covers_the_row_line_by_line():
    A, B = scaled(4, 100)
    s = te.create_schedule(B.op)
    i, _ = B.op.axis
    s[B].prefetch(A, i, 1)
    text = str(tf.lower(s, [A, B]))
    assert "prefetch(A[i * 100 + A.line * 16 + 100])" in text  # row i + 1, one 64-byte line each
    assert "for A.line in range(7)" in text  # ceil(100 floats / 16 per line)
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1)


def test_prefetch_in_a_reduction_and_on_a_symbolic_shape():
    n = te.var("n")
    A = te.placeholder((n, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    S = te.compute((n,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    (i,) = S.op.axis
    s[S].prefetch(A, i, 2)
    mod = tf.build(s, [A, S])
    for rows in (1, 5):
        a = np.random.default_rng(rows).random((rows, 64), dtype="float32")
        out = np.full(rows, np.nan, "float32")
        mod(a, out)
        np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)


def test_prefetch_of_a_tensor_the_stage_does_not_read():
    A, B = scaled(4, 8)
    C = te.compute((4, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(
        tf.ScheduleError,
        match=r"prefetch in stage 'C': 'A' is neither a tensor this stage reads \(B\) nor the output",
    ):
        s[C].prefetch(A, C.op.axis[0], 1)


@pytest.mark.parametrize("offset", [0, -1, 1.5, "2"])
def test_prefetch_offset_must_be_a_positive_count(offset):
    A, B = scaled(4, 8)
    s = te.create_schedule(B.op)
    with pytest.raises(
        tf.ScheduleError, match=r"prefetch of 'A' at 'i' in stage 'B': offset must be a positive"
    ):
        s[B].prefetch(A, B.op.axis[0], offset)


def test_prefetch_at_an_axis_that_is_not_a_leaf():
    A, B = scaled(4, 8)
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    s[B].split(j, factor=4)
    with pytest.raises(tf.ScheduleError, match=r"'j'.*stage 'B'"):
        s[B].prefetch(A, j, 1)


def test_prefetch_of_a_producer_computed_inside_the_loop_nest_is_left_out():
    A, B = scaled(6, 16)
    C = te.compute((6, 16), lambda i, j: B[i, j] - 1.0, name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[B].compute_at(s[C], j)  # B has no home of its own: a prefetch of it fetches nothing
    s[C].prefetch(B, i, 1)
    s[C].prefetch(B, j, 2)
    assert prefetches(s, [A, C]) == []
    check_against_numpy(s, [A], [C], lambda a: a * 2)


def test_prefetch_inside_a_parallel_loop():
    # the parallel body is outlined into its own function: the prefetched buffer goes with it
    # (the fuzzer's case, where the outlined body reads A only through the prefetch)
    A = te.placeholder((11, 7, 5), name="A")
    B = te.compute((11, 7, 5), lambda i, j, l: A[i, j, l] * 2.0 + 1.0, name="B")
    r, c = te.reduce_axis((0, 7), name="r"), te.reduce_axis((0, 5), name="c")
    C = te.compute((11,), lambda i: te.sum(B[i, r, c], axis=[r, c]), name="C")
    s = te.create_schedule(C.op)

    def axis(stage, name):
        return next(v for v in stage.leaf_iter_vars if v.name == name)

    s[C].reorder(c, r)
    ro, _ = s[C].split(r, factor=15, tail="guard")
    C_rf = s.rfactor(C, ro, factor_axis=1)
    i, j, _ = B.op.axis
    s[B].tile(i, j, 3, 2, tail="guard")
    s[B].reorder(axis(s[B], "j.outer"), axis(s[B], "i.outer"), axis(s[B], "l"))
    s[B].compute_at(s[C_rf], axis(s[C_rf], "r.inner"))
    s[B].vectorize(axis(s[B], "j.outer"))
    s[B].parallel(axis(s[B], "i.inner"))
    s[B].unroll(axis(s[B], "j.inner"))
    s[B].vectorize(axis(s[B], "l"))
    s[B].prefetch(A, axis(s[B], "i.inner"), 16)
    s[C_rf].vectorize(axis(s[C_rf], "r.outer"))
    s[C_rf].unroll(axis(s[C_rf], "c"))
    s[C_rf].unroll(axis(s[C_rf], "r.inner"))
    s[C].unroll(axis(s[C], "i"))
    check_against_numpy(s, [A], [C], lambda a: (a * 2 + 1).sum(axis=(1, 2)), rtol=1e-4, atol=1e-3)


def test_prefetch_names_an_input_read_through_an_inlined_producer():
    A, B = scaled(6, 50)
    C = te.compute((6, 50), lambda i, j: B[i, j] - 3.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    jo, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].prefetch(A, jo, 4)
    check_against_numpy(s, [A], [C], lambda a: a * 2 + 1 - 3)
    assert {p.buffer.name for p in prefetches(s, [A, C])} == {"A"}
    with pytest.raises(tf.ScheduleError, match=r"neither a tensor this stage reads \(B, A\)"):
        s[C].prefetch(C, jo, 4)


def test_prefetch_in_a_fused_loop_fetches_the_run_it_reads_not_whole_rows():
    A, B = scaled(33, 70)  # rows of 70: a 64-element step spans two rows at times
    s = te.create_schedule(B.op)
    fused = s[B].fuse(*B.op.axis)
    step, lane = s[B].split(fused, factor=64)
    s[B].vectorize(lane)
    s[B].prefetch(A, step, 12)
    check_against_numpy(s, [A], [B], lambda a: a * 2 + 1)
    text = str(tf.lower(s, [A, B]))
    assert "for A.line in range(4)" in text and "A.pf" not in text  # 64 floats: 4 lines


def test_prefetch_of_a_consumers_output_fetches_its_lines_writable():
    A, B = scaled(5, 77)
    C = te.compute((5, 77), lambda i, j: B[i, j] * B[i, j] + A[i, j], name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    jo, ji = s[B].split(B.op.axis[1], factor=16)
    s[B].vectorize(ji)
    s[B].prefetch(C, jo, 0)  # the lines of C that C's row loop writes where B computes now
    check_against_numpy(s, [A], [C], lambda a: (a * 2 + 1) ** 2 + a)
    text = str(tf.lower(s, [A, C]))
    assert "prefetch_write(C[" in text
    mod = tf.build(s, [A, C])
    if "+prfchw" in mod.target.features:  # older x86 cores have no prefetchw: LLVM reads instead
        assert "prefetchw" in mod.get_source("asm")


def test_prefetch_of_a_consumer_that_reads_elsewhere_is_refused():
    A, B = scaled(6, 6)
    T = te.compute((6, 6), lambda i, j: B[j, i], name="T")  # a transpose: not element for element
    s = te.create_schedule(T.op)
    with pytest.raises(
        tf.ScheduleError, match="nor the output of a stage that reads 'B' element for element"
    ):
        s[B].prefetch(T, B.op.axis[1], 0)
    with pytest.raises(tf.ScheduleError, match="non-negative"):
        U = te.compute((6, 6), lambda i, j: B[i, j] + 1.0, name="U")
        te.create_schedule(U.op)[B].prefetch(U, B.op.axis[1], -1)


def test_prefetch_of_a_4d_input_on_a_fused_index_is_a_short_run():
    # the input of a batch norm read on the fused index: its flat index (c*56 + h)*56 + w with
    # c, h, w the digits of the fused variable folds back to it, so each step prefetches the
    # few lines it reads ahead (before the fold, every channel and row: 57,000 lines a step)
    from tensorforge.ops.elementwise import schedule_elementwise

    x = te.placeholder((1, 256, 56, 56), name="x")
    scale = te.placeholder((256,), name="scale")
    y = te.compute(x.shape, lambda n, c, i, j: te.max(x[n, c, i, j] * scale[c], 0.0), name="y")
    s = schedule_elementwise(y, parallel=False)
    check_against_numpy(s, [x, scale], [y], lambda a, b: np.maximum(a * b[None, :, None, None], 0))
    text = str(tf.lower(s, [x, scale, y]).body)
    assert "prefetch(x[" in text and "x.pf1" not in text
    assert "for x.line in range(4)" in text  # 64 elements a step: 4 lines of 16


def test_prefetch_of_a_transposing_read_is_left_out():
    # a read transposing the last two dimensions, on a fused index: 64 outputs a step read one
    # element of each of 24 rows. Bounded loosely, the region spans every channel and row
    # (1.25 s for a 3 MB copy) past the 64 KiB cap; bounded tightly, one channel's 24 rows, whose
    # lines the next steps read again from L1 (2x slower with the prefetches)
    from tensorforge.ops.elementwise import schedule_elementwise

    x = te.placeholder((1, 64, 24, 24), name="x")
    y = te.compute(x.shape, lambda n, c, i, j: te.max(x[n, c, j, i], 0.0), name="y")
    s = schedule_elementwise(y, parallel=False)
    check_against_numpy(s, [x], [y], lambda a: np.maximum(a.transpose(0, 1, 3, 2), 0))
    assert not [p for p in prefetches(s, [x, y]) if p.buffer.name == "x"]


def test_prefetch_regions_under_the_cap_are_kept():
    from tensorforge.ops.elementwise import schedule_elementwise

    A, B = scaled(256, 256)  # a 2-d fused index folds back: a run of lines
    s = schedule_elementwise(B, parallel=False)
    assert prefetches(s, [A, B])


def transpose_4d(shape):
    from tensorforge.ops.elementwise import schedule_elementwise

    x = te.placeholder(shape, name="x")
    y = te.compute(x.shape, lambda n, c, i, j: te.max(x[n, c, j, i], 0.0), name="y")
    return x, y, schedule_elementwise(y, parallel=False)


@pytest.mark.parametrize("shape", [(1, 64, 56, 56), (8, 64, 24, 24), (1, 16, 112, 112)])
def test_a_transposing_read_whose_rows_fit_l1_is_not_prefetched(shape):
    # each chunk of 4096 outputs sweeps 2-9 channel planes' rows (up to 336 lines, 21 KiB),
    # a line each; the steps read every line again while it is in L1 (1 x 64 x 56^2, 1 thread:
    # 177 us with the prefetches, 84 without)
    x, y, s = transpose_4d(shape)
    assert not [p for p in prefetches(s, [x, y]) if p.buffer.name == "x"]
    check_against_numpy(s, [x], [y], lambda a: np.maximum(a.transpose(0, 1, 3, 2), 0))


def test_a_transposing_read_whose_rows_overflow_l1_keeps_its_prefetch():
    # a 1024^2 transpose: each chunk reads a column strip of all 1024 rows (64 KiB of lines),
    # which come back from L2: the prefetch pays (3.7 ms with it, 4.5 without, 1 thread)
    from tensorforge.ops.elementwise import schedule_elementwise

    x = te.placeholder((1024, 1024), name="x")
    y = te.compute((1024, 1024), lambda i, j: x[j, i] + 1.0, name="y")
    s = schedule_elementwise(y, parallel=False)
    assert [p for p in prefetches(s, [x, y]) if p.buffer.name == "x"]


def test_prefetch_of_a_bool_tensor_counts_its_bytes():
    # a bool is a byte in memory (one bit by its dtype): a 64-element row is one cache line,
    # and the schedule's prefetch of a bool mask lowers (it divided by zero bytes)
    n, m = 9, 300
    M = te.placeholder((n, m), name="M", dtype="bool")
    B = te.compute((m, n), lambda i, j: te.if_then_else(M[j, i], 1.0, -1.0), name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    io, ii = s[B].split(i, factor=16)
    s[B].reorder(io, j, ii)
    s[B].prefetch(M, io, 1)
    check_against_numpy(s, [M], [B], lambda a: np.where(a.T, 1.0, -1.0))
