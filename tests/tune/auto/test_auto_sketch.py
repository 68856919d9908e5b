"""Every schedule the sketch rules draw is correct: built and compared with NumPy on random data,
for matmul, conv2d, softmax, layer norm and fused subgraphs at awkward sizes (primes, 1s)."""

import math

import pytest
from auto_workloads import CASES, check

from tensorforge.tune.auto import SearchTask
from tensorforge.tune.auto.analytic import first_guess

SEEDS = {
    "matmul": (0, 1, 2),
    "matmul_bias_gelu": (3, 4),
    "conv2d": (5, 6),
    "conv_bn_relu": (7,),
    "softmax": (0, 1, 2),
    "layer_norm": (3, 4),
    "add_layer_norm": (5, 6),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sampled_schedules_match_numpy(name):
    func, args, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    for seed in SEEDS[name]:
        s, tensors = task.instantiate(task.sample(seed))
        check(task, s, tensors, reference, seed=seed)


@pytest.mark.parametrize("name", sorted(CASES))
def test_first_guess_matches_numpy(name):
    func, args, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    s, tensors = task.default_schedule()
    check(task, s, tensors, reference)


@pytest.mark.parametrize(
    "name, args",
    [
        ("matmul", (1, 1, 1)),
        ("matmul", (1, 13, 97)),
        ("matmul", (61, 1, 2)),
        ("conv2d", (1, 1, 1, 1, 1)),
        ("conv_bn_relu", (2, 2, 3, 7, 3)),
        ("softmax", (1, 1)),
        ("softmax", (3, 131)),
        ("layer_norm", (2, 1)),
        ("add_layer_norm", (13, 64)),
    ],
)
def test_rules_lower_on_odd_shapes(name, args):
    """Each rule applies (and lowers) whatever the extents: 10 draws per shape, no build."""
    import tensorforge as tf

    func, _, _ = CASES[name]
    task = SearchTask(func, args, "llvm")
    kinds = set()
    for seed in range(10):
        trace = task.sample(seed)
        kinds.update(step.kind for step in trace.steps)
        s, tensors = task.instantiate(trace)
        tf.lower(s, tensors)
    assert kinds  # the rules did schedule something


def test_rules_cover_each_sketch_choice():
    """Over a few draws the rules take each structural branch: inlining or not, fusion,
    cache_write, rfactor, compute locations, parallel, vectorize, unroll."""
    kinds = set()
    for name in ("matmul", "conv2d", "softmax", "matmul_bias_gelu"):
        func, args, _ = CASES[name]
        task = SearchTask(func, args, "llvm")
        for seed in range(12):
            kinds.update(step.kind for step in task.sample(seed).steps)
    expected = {"split", "fuse", "reorder", "parallel", "vectorize", "unroll", "pragma"}
    expected |= {"compute_at", "compute_inline", "cache_write", "rfactor"}
    assert expected <= kinds, expected - kinds


def test_first_guess_is_quick_and_uses_the_machine():
    import time

    func, _, _ = CASES["matmul"]
    task = SearchTask(func, (1024, 1024, 1024), "llvm")
    start = time.perf_counter()
    trace = first_guess(task)
    assert time.perf_counter() - start < 5  # (< 1 s unloaded; the CI box is shared)
    lanes = task.target_obj.vector_lanes("float32")
    tiles = trace.decisions["tile:2.C"]
    assert tiles[1][-1] % lanes == 0  # the register tile's columns are whole vectors
    assert tiles[0][-1] > 1  # and it has several rows
    assert trace.decisions["cw:2.C"] is True


@pytest.mark.parametrize(
    "name, fixed",
    [
        ("matmul", {"cw:2.C": True, "pack:2.C": True}),
        ("matmul_bias_gelu", {"pack:2.C": True}),
        ("conv2d", {"cw:3.conv": True, "pack:3.conv": True, "inline:1.padded": True}),
        ("softmax", {"inline:2.exp": False, "loc:2.exp": 0, "prefetch:2.exp": True}),
        ("layer_norm", {"prefetch:5.y": True, "vec:5.y": [[8]]}),
    ],
)
def test_packing_and_prefetch_match_numpy(name, fixed):
    """The packing rule (a cache_read panel per block of the last axis) and the next-row
    prefetch, on awkward sizes; the printed schedule shows them."""
    func, args, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    trace = task.sample(1, fixed)
    kind = "prefetch" if name in ("softmax", "layer_norm") else "cache_read"
    assert any(step.kind == kind for step in trace.steps)
    assert f".{kind}(" in task.to_python(trace)
    s, tensors = task.instantiate(trace)
    check(task, s, tensors, reference)


@pytest.mark.parametrize(
    "name, fixed",
    [
        ("matmul", {"cw:2.C": True, "rtile:2.C": [[8]], "kstep:2.C": 4}),  # k = 29: a tail
        ("matmul", {"cw:2.C": False, "rtile:2.C": [[4]], "kstep:2.C": 2}),
        ("matmul_bias_gelu", {"rtile:2.C": [[17]], "kstep:2.C": 1}),
        ("conv2d", {"cw:3.conv": True, "rtile:3.conv": [[5], [3], [3]], "kstep:3.conv": 3}),
    ],
)
def test_unrolled_k_steps_match_numpy(name, fixed):
    """The register tile's k steps unrolled by the kstep decision, also where the k block
    leaves a tail (29 = 3 x 8 + 5); the step is an unrolled loop in the trace."""
    func, args, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    trace = task.sample(1, fixed)
    key = next(k for k in fixed if k.startswith("kstep:"))
    assert trace.decisions[key] == fixed[key]
    unrolls = [step for step in trace.steps if step.kind == "unroll"]
    assert len(unrolls) >= (1 if fixed[key] > 1 else 0)
    s, tensors = task.instantiate(trace)
    check(task, s, tensors, reference)


@pytest.mark.parametrize(
    "name, fixed",
    [
        ("matmul", {"cw:2.C": True, "rtile:2.C": [[29]], "pack:2.C": False}),
        ("matmul", {"cw:2.C": True, "tile:2.C": [[2, 3, 5], [1, 2, 16]], "rtile:2.C": [[29]]}),
        ("matmul_bias_gelu", {"rtile:2.C": [[17]], "tile:2.C": [[1, 3, 7], [2, 1, 16]]}),
        (
            "conv_bn_relu",
            {
                "tile:3.conv": [[1, 1, 1], [1, 1, 5], [1, 3, 1], [1, 1, 7]],
                "rtile:3.conv": [[3], [3], [3]],
                "kstep:3.conv": 3,
            },
        ),
    ],
)
def test_accumulators_at_the_register_tile_match_numpy(name, fixed):
    """With the reduction in one block, the accumulators may be just the register tile,
    computed inside the output's tile loop (awkward sizes: tails in every tiled axis)."""
    import tensorforge as tf

    func, args, reference = CASES[name]
    task = SearchTask(func, args, "llvm")
    key = next(k.split(":", 1)[1] for k in fixed if k.startswith("rtile:"))
    trace = task.sample(2, {**fixed, f"acc:{key}": True, f"pack:{key}": False})
    assert trace.decisions[f"acc:{key}"] is True
    tile = math.prod(t[-1] for t in trace.decisions[f"tile:{key}"])
    s, tensors = task.instantiate(trace)
    assert f"float32[{tile}]" in str(tf.lower(s, tensors))  # the register tile, not a block
    check(task, s, tensors, reference)
    blocked = task.sample(2, {**trace.decisions, f"acc:{key}": False})
    assert f"float32[{tile}]" not in str(tf.lower(*task.instantiate(blocked)))


def test_first_guess_unrolls_k_steps_and_blocks_k_to_l2():
    """The first guess's micro-kernel: 4 k steps a loop step, k blocked so that the register
    tile's panel of B (k block x its columns) fits a quarter of L2."""
    from tensorforge.tune.auto.analytic import Machine

    func, _, _ = CASES["matmul"]
    for k in (1024, 8192):
        task = SearchTask(func, (64, k, 64), "llvm")
        trace = first_guess(task)
        assert trace.decisions["kstep:2.C"] == 4
        columns = trace.decisions["tile:2.C"][1][-1]
        (block,) = trace.decisions["rtile:2.C"][0]
        assert block * columns * 4 <= Machine.of(task.target_obj).l2 // 4
        assert block == k or block * columns * 4 * 2 > Machine.of(task.target_obj).l2 // 4


def test_first_guess_schedule_of_bare_outputs():
    """What the torch.compile backend calls for a fused group with no tuning record: outputs in,
    a buildable schedule out (here softmax, compared with NumPy)."""
    from tensorforge.tune.auto.analytic import first_guess_schedule

    func, args, reference = CASES["softmax"]
    tensors = func(*args)
    s, steps = first_guess_schedule(tensors[-1], "llvm")
    assert {"rfactor", "vectorize", "compute_at"} <= {step.kind for step in steps}

    class _Task:
        target = "llvm"

    check(_Task, s, tensors, reference)


@pytest.mark.parametrize(
    "target, rows, vectors, lanes",
    [("llvm -mcpu=skylake-avx512", 8, 2, 16), ("llvm -mcpu=znver3", 6, 2, 8)],
)
def test_first_guess_takes_the_hand_micro_kernel_from_the_target(target, rows, vectors, lanes):
    """The GEMM first guess is ops/matmul's micro-kernel for the target named (not this host):
    8 x 2 vectors of 32 zmm registers, 6 x 2 of 16 ymm (its 4 tail rows of 1024 in a peeled
    block); the accumulator block nearly all rows tall; k whole (its B panel fits L2)."""
    func, _, _ = CASES["matmul"]
    trace = first_guess(SearchTask(func, (1024, 1024, 1024), target))
    row_tiles, column_tiles = trace.decisions["tile:2.C"]
    assert row_tiles[-1] == rows and column_tiles[-1] == vectors * lanes
    assert row_tiles[-2] * rows >= 0.49 * 1024  # a block of (nearly) all rows, or half
    assert trace.decisions["rtile:2.C"] == [[1024]]


@pytest.mark.parametrize(
    "target, width, rows, lanes",
    [("llvm -mcpu=skylake-avx512", 56, 4, 16), ("llvm -mcpu=znver3", 28, 2, 8)],  # 32, 16 regs
)
def test_first_guess_tiles_a_short_row_whole(target, width, rows, lanes):
    """A convolution's output row of 2-4 vectors (56 columns of 16 lanes) is one register tile,
    its last vector partial, as ops' conv2d does, not a 2-vector tile and a tail block; with
    the reduction in one block, the accumulators are that tile."""
    func, _, _ = CASES["conv2d"]
    trace = first_guess(SearchTask(func, (1, 64, 14, width, 64), target))
    tiles = trace.decisions["tile:3.conv"]
    assert tiles[-1][-1] == width and tiles[1][-1] == rows
    assert 2 * lanes < width <= 4 * lanes
    assert trace.decisions["acc:3.conv"] is True


def test_first_guess_keeps_the_register_tile_inside_packed_panels():
    """B packed in panels of 16 columns (B[j // 16, k, j % 16], as the torch backend packs
    weights): a register tile wider than a panel would gather every load."""
    from tensorforge import te
    from tensorforge.tune.auto import register_workload

    @register_workload(name="test/packed_matmul")
    def packed_matmul(n, k, m):
        A = te.placeholder((n, k), name="A")
        P = te.placeholder((m // 16, k, 16), name="P")
        r = te.reduce_axis((0, k), name="r")
        C = te.compute(
            (n, m), lambda i, j: te.sum(A[i, r] * P[j // 16, r, j % 16], axis=r), name="C"
        )
        return [A, P, C]

    def reference(A, P):
        return A @ P.transpose(1, 0, 2).reshape(A.shape[1], -1)

    task = SearchTask(packed_matmul, (13, 7, 64), "llvm -mcpu=skylake-avx512")
    (_, column_tiles) = first_guess(task).decisions["tile:2.C"]
    assert 16 % column_tiles[-1] == 0
    task = SearchTask(packed_matmul, (13, 7, 64), "llvm")
    trace = first_guess(task)
    assert 16 % trace.decisions["tile:2.C"][1][-1] == 0
    s, tensors = task.instantiate(trace)
    check(task, s, tensors, reference)


@pytest.mark.parametrize("rows, columns", [(13, 24), (1, 8), (7, 40)])
def test_a_reduction_across_rows_reduces_vectors_of_outputs(rows, columns):
    """sum(x[k, j], k): the first guess loads contiguous vectors of outputs (no rfactor along
    the strided k); the rule is a decision, and both ways match NumPy."""
    from tensorforge import te
    from tensorforge.tune.auto import register_workload

    @register_workload(name="test/column_sum")
    def column_sum(n, m):
        x = te.placeholder((n, m), name="x")
        k = te.reduce_axis((0, n), name="k")
        return [x, te.compute((m,), lambda j: te.sum(x[k, j], axis=k), name="total")]

    task = SearchTask(column_sum, (rows, columns), "llvm")
    lanes = task.target_obj.vector_lanes("float32")
    trace = first_guess(task)
    assert bool(trace.decisions.get("cols:1.total")) is (columns % lanes == 0)  # 16 lanes: 24 no
    kinds = [step.kind for step in trace.steps]
    assert "rfactor" not in kinds or columns % lanes
    for t in (trace, task.sample(0, {"cols:1.total": False}), task.sample(1)):
        s, tensors = task.instantiate(t)
        check(task, s, tensors, lambda x: x.sum(0))


@pytest.mark.parametrize(
    "target, width, vector",
    [("llvm -mcpu=skylake-avx512", 56, 16), ("llvm -mcpu=znver3", 56, 8), ("llvm", 7, 4)],
)
def test_a_window_reduction_reduces_vectors_of_outputs(target, width, vector):
    """A 3 x 3 stride-2 max pool with clamped padding: the first guess vectorizes the output
    columns (the target's vector, its last one's lanes past the row clamped; a row shorter
    than a vector: the widest that fits it, 7 columns 4 lanes), the window loops outside the lanes and unrolled; with the decision
    off it stays scalar; each way matches NumPy."""
    import numpy as np

    from tensorforge import te
    from tensorforge.tune.auto import register_workload

    @register_workload(name="test/max_pool_3x3s2")
    def max_pool(h, w):
        x = te.placeholder((2, h, w), name="x")
        ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")

        def body(c, y, j):
            row = te.max(te.min(y * 2 - 1 + ry.var, h - 1), 0)
            column = te.max(te.min(j * 2 - 1 + rx.var, w - 1), 0)
            return te.max(x[c, row, column], axis=[ry, rx])

        oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
        return [x, te.compute((2, oh, ow), body, name="pool")]

    def reference(x):
        padded = np.pad(x, ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        oh, ow = (x.shape[1] - 1) // 2 + 1, (x.shape[2] - 1) // 2 + 1
        windows = [
            padded[:, a : a + 2 * oh : 2, b : b + 2 * ow : 2] for a in range(3) for b in range(3)
        ]
        return np.max(windows, axis=0)

    task = SearchTask(max_pool, (9, 2 * width - 1), target)
    trace = first_guess(task)
    assert trace.decisions["win:1.pool"] == vector
    assert [step.kind for step in trace.steps].count("unroll") == 2
    for t in (trace, task.sample(0, {"win:1.pool": 0})):
        s, tensors = task.instantiate(t)
        check(task, s, tensors, reference)
