"""Every schedule the sketch rules draw is correct: built and compared with NumPy on random data,
for matmul, conv2d, softmax, layer norm and fused subgraphs at awkward sizes (primes, 1s)."""

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
