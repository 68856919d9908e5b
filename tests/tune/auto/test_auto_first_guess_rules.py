"""The first guess's rules for fused epilogues and row streams: a padding of 0 read in place
under rows of one register tile (copied under wider ones), a fused epilogue at an odd register
tile width, rows streamed from memory a cache line a step. Each
against NumPy on odd shapes (primes, 1s)."""

import numpy as np
import pytest
from auto_workloads import CASES, check, conv2d, ref_conv2d

import tensorforge as tf
from tensorforge import te
from tensorforge.tune.auto import SearchTask
from tensorforge.tune.auto.analytic import first_guess
from tensorforge.tune.auto.sketch import has_lane_math, is_identity_copy


def test_identity_copy_is_a_padding_of_zero_only():
    x = te.placeholder((3, 5), name="x")
    assert is_identity_copy(te.compute((3, 5), lambda i, j: x[i, j], name="copy").op)
    for name, tensor in [
        ("padded", conv2d(1, 2, 3, 5, 2, kh=1, pad=0)[-1].op.input_tensors[0]),
        ("padded1", conv2d(1, 2, 3, 5, 2, kh=3, pad=1)[-1].op.input_tensors[0]),
    ]:
        assert is_identity_copy(tensor.op) == (name == "padded")
    square = te.placeholder((4, 4), name="square")
    transposed = te.compute((4, 4), lambda i, j: square[j, i], name="t")
    cropped = te.compute((3, 5), lambda i, j: square[i, j % 4], name="crop")
    scaled = te.compute((3, 5), lambda i, j: x[i, j] * 2.0, name="scaled")
    part = te.compute((2, 5), lambda i, j: x[i, j], name="part")  # 2 of the 3 rows
    for op in (transposed.op, cropped.op, scaled.op, part.op):
        assert not is_identity_copy(op)


@pytest.mark.parametrize("args", [(1, 5, 7, 13, 3), (2, 3, 1, 1, 1), (1, 1, 11, 2, 17)])
def test_first_guess_inlines_a_padding_of_zero(args):
    """A 1x1 convolution's padding of 0 is the data itself: read in place, not copied first
    (a 3x3 convolution's padding is still computed once)."""
    task = SearchTask(conv2d, (*args, 1, 0), "llvm")
    trace = first_guess(task)
    assert trace.decisions["inline:1.padded"] is True
    s, tensors = task.instantiate(trace)
    assert "padded" not in str(tf.lower(s, tensors))
    check(task, s, tensors, lambda d, w: ref_conv2d(d, w, pad=0))
    padded = first_guess(SearchTask(conv2d, (1, 3, 5, 7, 2), "llvm"))
    assert padded.decisions["inline:1.padded"] is False


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake-avx512", "llvm -mcpu=znver3"])
def test_a_padding_of_zero_is_copied_for_rows_of_several_tiles(target):
    """Rows wider than a register tile (4 vectors): the copy streams the data into cache for
    the tiles' strided reads, so it stays (56 columns at AVX2's 8 lanes; read in place at
    AVX-512's 16)."""
    lanes = tf.Target(target).vector_lanes("float32")
    task = SearchTask(conv2d, (1, 3, 2, 56, 5, 1, 0), target)
    assert first_guess(task).decisions["inline:1.padded"] is (56 <= 4 * lanes)
    wide = SearchTask(conv2d, (1, 3, 2, 4 * lanes + 3, 5, 1, 0), target)
    trace = first_guess(wide)
    assert trace.decisions["inline:1.padded"] is False
    with tf.Target(target):
        s, tensors = wide.instantiate(trace)
    check(wide, s, tensors, lambda d, w: ref_conv2d(d, w, pad=0))


def _odd_width(target: str) -> int:
    """A row of 3 vectors and a few lanes (53 floats of 16 lanes): one register tile, its
    width not a power of two."""
    return 3 * tf.Target(target).vector_lanes("float32") + 5


@pytest.mark.parametrize("args", [(1, 3, 2, None, 5), (2, 1, 1, None, 1)])
def test_fused_epilogue_at_an_odd_tile_width_matches_numpy(args):
    """conv + BN + ReLU whose output row (53 floats) is one register tile of 3 vectors and 8
    lanes (5 on): the epilogue, fused at the tile, computes the same as NumPy (its vectors in
    power-of-two pieces, the lanes past the row off)."""
    func, _, reference = CASES["conv_bn_relu"]
    args = tuple(_odd_width("llvm") if a is None else a for a in args)
    task = SearchTask(func, args, "llvm")
    trace = first_guess(task)
    lanes = tf.Target("llvm").vector_lanes("float32")
    assert trace.decisions["tile:3.conv"][-1][-1] == 3 * lanes + 8  # the whole row, one tile
    s, tensors = task.instantiate(trace)
    check(task, s, tensors, reference, seed=3)


def test_fused_gelu_at_an_odd_tile_width_matches_numpy():
    func, _, reference = CASES["matmul_bias_gelu"]
    task = SearchTask(func, (7, 3, _odd_width("llvm")), "llvm")
    s, tensors = task.default_schedule()
    check(task, s, tensors, reference, seed=4)


def test_lane_math_is_math_along_the_row():
    x = te.placeholder((3, 5), name="x")
    stat = te.placeholder((3,), name="stat")
    assert has_lane_math(te.compute((3, 5), lambda i, j: te.exp(x[i, j]), name="e").op)
    plain = te.compute((3, 5), lambda i, j: x[i, j] * te.rsqrt(stat[i] + 1.0), name="n")
    assert not has_lane_math(plain.op)


@pytest.mark.parametrize(
    "name, args", [("layer_norm", (5, 263)), ("add_layer_norm", (3, 521)), ("layer_norm", (1, 8))]
)
def test_rows_streamed_a_line_a_step_with_one_input_fetched_ahead(name, args):
    """Layer norm's normalization reads rows from memory with little arithmetic a lane: a
    cache line a step (ops' layer norm), the next row fetched ahead; after a residual add
    inlined into it, 4 vectors a step and nothing fetched (two streams: prefetching them cost
    more than it brought); short rows (under 8 lines): nothing fetched."""
    func, _, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    trace = first_guess(task)
    line = max(task.target_obj.vector_lanes("float32"), 16)
    key = next(k for k in trace.decisions if k.startswith("vec:") and k.endswith(".y"))
    s, tensors = task.instantiate(trace)
    ir = str(tf.lower(s, tensors))
    fetched = {t for t in ("x", "a", "residual") if f"prefetch({t}[" in ir}
    lanes = task.target_obj.vector_lanes("float32")
    if name == "add_layer_norm":
        assert trace.decisions[key] == [[4 * lanes]] and not fetched
    elif args[1] >= 8 * line:
        assert trace.decisions[key] == [[line]] and fetched == {"x"}
    else:
        assert not fetched
    check(task, s, tensors, reference, seed=5)


def test_rows_past_l1_are_not_fetched_ahead():
    """A row longer than L1 (a group norm's group of 64 x 64 planes is 256 KB) would not stay
    there until it is read: nothing fetched, and the rows still match NumPy."""
    func, _, reference = CASES["layer_norm"]
    l1 = tf.Target("llvm").cache_bytes[0]
    task = SearchTask(func, (2, l1 // 4 + 7), "llvm")
    trace = first_guess(task)
    assert not any(v for k, v in trace.decisions.items() if k.startswith("prefetch:"))
    s, tensors = task.instantiate(trace)
    assert "prefetch(" not in str(tf.lower(s, tensors))
    check(task, s, tensors, reference, seed=6)


def test_softmax_keeps_four_vectors_a_step_for_its_exp():
    """exp along the row: 4 vectors a step (independent chains), not a line."""
    func, _, reference = CASES["softmax"]
    task = SearchTask(func, (3, 1031), "llvm")
    trace = first_guess(task)
    lanes = task.target_obj.vector_lanes("float32")
    assert trace.decisions["vec:2.exp"] == [[4 * lanes]]
    check(task, *task.instantiate(trace), reference, seed=6)


def test_identity_padding_in_place_of_a_copy_reads_the_same():
    """The inlined padding of 0 inside a conv + BN + ReLU at a 1x1 kernel: as NumPy."""
    from tensorforge.tune.auto.analytic import first_guess_schedule

    data, weight, conv = conv2d(1, 3, 5, 7, 4, kh=1, pad=0)
    out = te.compute(conv.shape, lambda n, f, y, x: te.max(conv[n, f, y, x], 0.0), name="relu")
    s, _ = first_guess_schedule(out, "llvm")
    assert "padded" not in str(tf.lower(s, [data, weight, out]))
    mod = tf.build(s, [data, weight, out], target="llvm")
    rng = np.random.default_rng(7)
    d = rng.uniform(-1, 1, (1, 3, 5, 7)).astype("float32")
    w = rng.uniform(-1, 1, (4, 3, 1, 1)).astype("float32")
    result = tf.nd.array(np.full((1, 4, 5, 7), np.nan, "float32"))
    mod(tf.nd.array(d), tf.nd.array(w), result)
    np.testing.assert_allclose(result.numpy(), np.maximum(ref_conv2d(d, w, pad=0), 0), 2e-5, 2e-5)


def column_sum(b, k, m):
    x = te.placeholder((b, k, m), name="x")
    r = te.reduce_axis((0, k), name="r")
    return [x, te.compute((b, m), lambda i, j: te.sum(x[i, r, j], axis=r), name="colsum")]


@pytest.mark.parametrize("vectors, chains", [(6, 6), (9, 3), (1, 1)])
def test_column_sum_keeps_several_vector_chains(vectors, chains):
    """A sum across rows (a sequence mean) walks up to 8 vectors of outputs a step, unrolled:
    independent add chains instead of one as long as the reduction (9 vectors: 3 a step)."""
    lanes = tf.Target("llvm").vector_lanes("float32")
    task = SearchTask(column_sum, (2, 37, vectors * lanes), "llvm")
    s, tensors = task.instantiate(first_guess(task))
    ir = str(tf.lower(s, tensors))
    inner = ir[ir.index("for r in range(37)") :].split("\n")[1:]
    updates = [line for line in inner if "colsum" in line and "+ x[ramp(" in line]
    assert len(updates) == chains
    check(task, s, tensors, lambda x: x.astype(np.float64).sum(axis=1), seed=7)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3"])
def test_row_statistics_of_batched_rows_are_staged_a_row_at_a_time(target, monkeypatch):
    """Softmax over (1, 3, 5, 19) (a batch of 1, heads, rows) on one thread (no loops fused
    for threads): the row max, the exps and the row sum are computed at the row loop, one row
    of exps staged (19 floats), not all 15 rows at the batch loop of extent 1 (12 MB of exps
    at (1, 12, 500, 500): 2x slower)."""
    from tensorforge.tune.auto.analytic import first_guess_schedule

    monkeypatch.setenv("TF_NUM_THREADS", "1")
    shape = (1, 3, 5, 19)
    x = te.placeholder(shape, name="x")
    k1, k2 = te.reduce_axis((0, 19), name="k1"), te.reduce_axis((0, 19), name="k2")
    mx = te.compute(shape[:3], lambda b, h, i: te.max(x[b, h, i, k1], axis=k1), name="mx")
    e = te.compute(shape, lambda b, h, i, j: te.exp(x[b, h, i, j] - mx[b, h, i]), name="e")
    sm = te.compute(shape[:3], lambda b, h, i: te.sum(e[b, h, i, k2], axis=k2), name="sm")
    y = te.compute(shape, lambda b, h, i, j: e[b, h, i, j] / sm[b, h, i], name="y")
    s, _ = first_guess_schedule(y, target)
    ir = str(tf.lower(s, [x, y], target=target))
    assert "e = allocate(float32[19]" in ir and "mx = allocate(float32[1]" in ir, ir
    mod = tf.build(s, [x, y], target=target)
    data = np.random.default_rng(8).standard_normal(shape).astype("float32")
    got = tf.nd.array(np.full(shape, np.nan, "float32"))
    mod(tf.nd.array(data), got)
    want = np.exp(data - data.max(-1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), want / want.sum(-1, keepdims=True), 1e-5, 1e-6)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512"])
@pytest.mark.parametrize("width", [14, 7, 13, 3, 22])
def test_a_short_row_is_one_tile_of_power_of_two_vectors(target, width):
    """A row whose last vector would hold a lane count that is not a power of two (14 of 16)
    is one register tile rounded up to one (16): the lanes past the row are off, the reads
    past it (into the next padded row, or the buffer's end) not made, and the answer
    NumPy's."""
    lanes = tf.Target(target).vector_lanes("float32")
    task = SearchTask(conv2d, (1, 3, 5, width, 4), target)
    trace = first_guess(task)
    tile = trace.decisions["tile:3.conv"][-1]
    tail = tile[-1] % lanes
    assert tail & (tail - 1) == 0  # no vector of 8 + 4 + 2 pieces
    if width < lanes:
        assert tile[-1] >= width
    if tile[-1] > width:  # rounded up past the row: one tile
        assert tile[:-1] == [1, 1]
    with tf.Target(target):
        s, tensors = task.instantiate(trace)
    check(task, s, tensors, lambda d, w: ref_conv2d(d, w, pad=1))


def test_tile_decisions_take_one_padded_tile_only():
    from tensorforge.tune.auto.decisions import _valid_tiles

    assert _valid_tiles([[1, 1, 16]], [14], 4)  # one tile, 2 lanes off
    assert not _valid_tiles([[1, 1, 32]], [14], 4)  # more than the axis again
    assert not _valid_tiles([[1, 2, 8]], [14], 4)  # two tiles reaching past the axis
    assert _valid_tiles([[1, 2, 7]], [14], 4)


@pytest.mark.parametrize("target", ["llvm -mcpu=znver3", "llvm -mcpu=skylake-avx512"])
def test_a_window_reduction_leaves_no_tail_block_of_filters(target):
    """A convolution's register tile of filters divides the filters: its peeled tail block
    would run every tile step masked (1 filter of 256 past 5-filter tiles at AVX2)."""
    conv = first_guess(SearchTask(conv2d, (1, 8, 5, 14, 256), target))
    rows = conv.decisions["tile:3.conv"][1][-1]
    assert 256 % rows == 0
