"""Each operator's template: its default config is the operator's default schedule (the same
lowered IR), and random configs of its space build and match NumPy at awkward sizes (primes,
1, extents no tile divides)."""

import shutil
import subprocess

import numpy as np
import pytest

import tensorforge as tf
from tensorforge import ops, tune
from tensorforge.testing.check import _aligned_copy


def run(mod, *arrays):
    arrays = [_aligned_copy(a) for a in arrays]
    mod(*arrays)
    return arrays


def matmul_ref(a, b):
    return a @ b


def softmax_ref(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def layer_norm_ref(x, g, b):
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * g + b


def chain_ref(x, scale=2.0):
    return 1 / (1 + np.exp(-(np.maximum(x, 0) * scale + 1)))


def conv_ref(d, w, stride, pad):
    f, c, kh, kw = w.shape
    dp = np.pad(d, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (dp.shape[2] - kh) // stride + 1
    ow = (dp.shape[3] - kw) // stride + 1
    out = np.zeros((d.shape[0], f, oh, ow), "float64")
    for ky in range(kh):
        for kx in range(kw):
            window = dp[:, :, ky : ky + stride * oh : stride, kx : kx + stride * ow : stride]
            out += np.einsum("bchw,fc->bfhw", window, w[:, :, ky, kx])
    return out


# (template name, its arguments, the default schedule's call, inputs' shapes, reference)
CASES = {
    "matmul_prime": (
        "builtin/matmul",
        [37, 53, 19, "float32"],
        lambda: ops.schedule_matmul(37, 53, 19),
        [(37, 19), (19, 53)],
        matmul_ref,
    ),
    "matmul_long_k": (  # k past what fits L1 on any target: the packed, k-blocked schedule
        "builtin/matmul",
        [13, 41, 2311, "float32", False],
        lambda: ops.schedule_matmul(13, 41, 2311, parallel=False),
        [(13, 2311), (2311, 41)],
        matmul_ref,
    ),
    "dense": (  # B as a linear layer's (out, in) weight: C = A @ B.T
        "builtin/matmul",
        [29, 43, 31, "float32", True, True],
        lambda: ops.schedule_matmul(29, 43, 31, transpose_b=True),
        [(29, 31), (43, 31)],
        lambda a, b: a @ b.T,
    ),
    "dense_long_k": (
        "builtin/matmul",
        [7, 19, 2053, "float32", False, True],
        lambda: ops.schedule_matmul(7, 19, 2053, parallel=False, transpose_b=True),
        [(7, 2053), (19, 2053)],
        lambda a, b: a @ b.T,
    ),
    "batch_matmul": (
        "builtin/batch_matmul",
        [3, 17, 29, 11, "float32"],
        lambda: ops.schedule_batch_matmul(3, 17, 29, 11),
        [(3, 17, 11), (3, 11, 29)],
        lambda a, b: a @ b,
    ),
    "batch_matmul_transposed": (
        "builtin/batch_matmul",
        [1, 5, 13, 37, "float32", False, True],
        lambda: ops.schedule_batch_matmul(1, 5, 13, 37, parallel=False, transpose_b=True),
        [(1, 5, 37), (1, 13, 37)],
        lambda a, b: a @ b.transpose(0, 2, 1),
    ),
    "matmul_ones": (
        "builtin/matmul",
        [1, 1, 7, "float32"],
        lambda: ops.schedule_matmul(1, 1, 7),
        [(1, 7), (7, 1)],
        matmul_ref,
    ),
    "conv2d": (
        "builtin/conv2d",
        [1, 5, 11, 13, 7, 3, 3, 1, 1, "float32"],
        lambda: ops.schedule_conv2d(1, 5, 11, 13, 7),
        [(1, 5, 11, 13), (7, 5, 3, 3)],
        lambda d, w: conv_ref(d, w, 1, 1),
    ),
    "conv2d_strided": (
        "builtin/conv2d",
        [2, 3, 9, 14, 5, 3, 2, 2, 0, "float32"],
        lambda: ops.schedule_conv2d(2, 3, 9, 14, 5, kernel=(3, 2), pad=0, stride=2),
        [(2, 3, 9, 14), (5, 3, 3, 2)],
        lambda d, w: conv_ref(d, w, 2, 0),
    ),
    "softmax": (
        "builtin/softmax",
        [7, 131, "float32"],
        lambda: ops.schedule_softmax(7, 131),
        [(7, 131)],
        softmax_ref,
    ),
    "softmax_one_column": (
        "builtin/softmax",
        [3, 1, "float32"],
        lambda: ops.schedule_softmax(3, 1),
        [(3, 1)],
        softmax_ref,
    ),
    "layer_norm": (
        "builtin/layer_norm",
        [5, 97, "float32"],
        lambda: ops.schedule_layer_norm(5, 97),
        [(5, 97), (97,), (97,)],
        layer_norm_ref,
    ),
    "row_max": (
        "builtin/row_reduce",
        [5, 101, "max", "float32"],
        lambda: ops.schedule_row_reduce(5, 101, "max"),
        [(5, 101)],
        lambda x: x.max(1),
    ),
    "row_sum_short_rows": (
        "builtin/row_reduce",
        [3, 7, "sum", "float32", False],
        lambda: ops.schedule_row_reduce(3, 7, parallel=False),
        [(3, 7)],
        lambda x: x.sum(1),
    ),
    "elementwise": (
        "builtin/elementwise",
        [3, 1031, 0.5, "float32"],
        lambda: (lambda x, y: (ops.schedule_elementwise(y), [x, y]))(
            *ops.fused_chain(3, 1031, 0.5)
        ),
        [(3, 1031)],
        lambda x: chain_ref(x, 0.5),
    ),
}


def check(s, tensors, shapes, reference, rng):
    mod = tf.build(s, tensors)
    inputs = [rng.uniform(-2, 2, shape).astype("float32") for shape in shapes]
    out_shape = tuple(int(e.value) for e in tensors[-1].shape)
    *_, out = run(mod, *inputs, np.full(out_shape, np.nan, "float32"))
    np.testing.assert_allclose(out, reference(*inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", sorted(CASES))
def test_default_config_is_the_default_schedule_and_matches_numpy(case, rng):
    name, args, default, shapes, reference = CASES[case]
    task = tune.create_task(name, args)
    s, tensors = task.instantiate(task.config_space.default())
    s_default, tensors_default = default()
    assert str(tf.lower(s, tensors)) == str(tf.lower(s_default, tensors_default))
    check(s, tensors, shapes, reference, rng)


@pytest.mark.parametrize("case", sorted(CASES))
def test_random_configs_match_numpy(case, rng):
    name, args, _, shapes, reference = CASES[case]
    task = tune.create_task(name, args)
    assert len(task.config_space) > 1
    picks = np.random.default_rng(sum(map(ord, case))).choice(len(task.config_space), 3)
    for index in picks:
        s, tensors = task.instantiate(int(index))
        try:
            check(s, tensors, shapes, reference, rng)
        except AssertionError as e:
            raise AssertionError(f"config {task.config(int(index))}: {e}") from None


def test_the_default_knobs_are_the_target_heuristics():
    """The matmul template's default config holds MatmulTiles.for_target's choices."""
    for cpu in ("skylake-avx512", "haswell"):
        target = tf.Target(f"llvm -mcpu={cpu}")
        task = tune.create_task("builtin/matmul", [512, 512, 512, "float32"], target)
        assert task.flop == 2 * 512**3  # the product's work, not the packing's
        knobs = task.config_space.default().knobs
        tiles = ops.MatmulTiles.for_target(target)
        lanes = target.vector_lanes("float32")
        assert (knobs["mr"], knobs["nr_vectors"] * lanes, knobs["kc"]) == (
            tiles.mr,
            tiles.nr,
            tiles.kc,
        )


def test_schedule_matmul_applies_the_best_logged_config(tmp_path):
    """The default schedule function is the template: under apply_history_best it takes the
    logged config (here a hand-written record of a non-default one)."""
    from tensorforge.tune.measure import MeasureInput, MeasureResult
    from tensorforge.tune.records import encode

    task = tune.create_task("builtin/matmul", [24, 40, 16, "float32"])
    config = task.config_space.get(7)
    log = tmp_path / "mm.jsonl"
    result = MeasureResult(costs=(1e-3,), error_no=0, error_msg="", all_cost=1.0, timestamp=0.0)
    log.write_text(encode(MeasureInput(task, config), result) + "\n")
    with tune.apply_history_best(str(log)), tf.Target(task.target):
        s, tensors = ops.schedule_matmul(24, 40, 16)
    expected = task.instantiate(config)
    assert str(tf.lower(s, tensors)) == str(tf.lower(*expected))
    assert str(tf.lower(s, tensors)) != str(tf.lower(*task.instantiate(0)))


def nvcc_compiles(source: str, tmp_path) -> None:
    if shutil.which("nvcc") is None:
        return
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    result = subprocess.run(
        ["nvcc", "-arch=sm_90", "--ptx", "-o", str(tmp_path / "k.ptx"), str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_cuda_templates_compile(tmp_path):
    """The CUDA matmul's default config is schedule_matmul_cuda's; builtin/matmul on a CUDA
    target is the same template; the first and last configs of each GPU template give CUDA C
    that nvcc compiles (they run on the GPU machine in tests/tune/test_cuda.py)."""
    target = "cuda -arch=sm_90"
    task = tune.create_task("builtin/matmul_cuda", [96, 160, 40, "float32"], target)
    s, tensors = task.instantiate(0)
    default = ops.schedule_matmul_cuda(96, 160, 40)
    assert str(tf.lower(s, tensors)) == str(tf.lower(*default))
    generic = tune.create_task("builtin/matmul", [96, 160, 40, "float32"], target)
    assert str(tf.lower(*generic.instantiate(0))) == str(tf.lower(s, tensors))
    assert "__shared__" in tf.build(s, tensors, target=target).get_source("cuda")
    for name, args, needle in [
        ("builtin/matmul_cuda", [96, 160, 40, "float32"], "__shared__"),
        ("builtin/matmul_cuda", [64, 100, 24, "float32", True], "__shared__"),
        ("builtin/softmax", [7, 300, "float32"], "__shfl_down_sync"),
        ("builtin/batch_matmul", [3, 40, 50, 9, "float32"], "blockIdx.z"),
        ("builtin/row_reduce", [7, 300, "max", "float32"], "__shfl_down_sync"),
        ("builtin/elementwise", [7, 300, 2.0, "float32"], "blockIdx.x"),
    ]:
        task = tune.create_task(name, args, target)
        for index in (0, len(task.config_space) - 1):
            source = tf.build(*task.instantiate(index), target=target).get_source("cuda")
            assert needle in source, (name, index)
            nvcc_compiles(source, tmp_path)
