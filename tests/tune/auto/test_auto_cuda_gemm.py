"""The GPU first guess for GEMM is ops' hand schedule (128 x 128 block tiles of 16 x 16 threads,
8 x 8 outputs a thread in 2 x 2 vthread pieces, float4 fetches into double-buffered shared
memory), derived from the target's facts; smaller tiles where the grid would not fill the SMs;
every variant of that sketch legal on odd shapes (nvcc here, NumPy on a GPU)."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from auto_workloads import matmul, ref_matmul

import tensorforge as tf
from tensorforge import te
from tensorforge.target import Target
from tensorforge.tune.auto import SearchTask
from tensorforge.tune.auto.analytic import AnalyticPolicy, first_guess
from tensorforge.tune.auto.decisions import Decisions

TARGET = "cuda -arch=sm_90"
NVCC = shutil.which("nvcc")


def _decisions(task, fixed=None, seed=0):
    """The first guess's decisions with `fixed` ones ({kind: value}) replacing its own."""
    d = Decisions(seed, policy=AnalyticPolicy(task.target_obj))
    task.generate(d)
    used = dict(d.used)
    for kind, value in (fixed or {}).items():
        used.update({k: value for k in used if k.split(":")[0] == kind})
    out = Decisions(seed, fixed=used, policy=AnalyticPolicy(task.target_obj))
    trace, _, _ = task.generate(out)
    return trace, out.used


def _source(task, trace):
    s, tensors = task.instantiate(trace)
    return tf.build(s, tensors, target=task.target).get_source("cuda")


def _nvcc(tmp_path, sources):
    for k, src in enumerate(sources):
        path = tmp_path / f"g{k}.cu"
        path.write_text(src)
        result = subprocess.run(
            [NVCC, "--ptx", "-arch=sm_90", str(path), "-o", str(tmp_path / f"g{k}.ptx")],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr[-2000:]


def _launch(src):
    grid, block = re.search(r"grid=\((\d+), 1, 1\) block=\((\d+), 1, 1\)", src).groups()
    return int(grid), int(block)


def test_cuda_target_facts():
    t = Target(TARGET)
    assert (t.sm_count, t.warp_size, t.registers_per_thread) == (132, 32, 255)
    assert t.max_shared_memory_per_block == 48 * 1024 and t.max_threads_per_block == 1024
    assert Target("cuda -arch=sm_80").sm_count == 108


def test_first_guess_gemm_4096_is_the_hand_schedule():
    task = SearchTask(matmul, (4096, 4096, 4096), TARGET)
    trace = first_guess(task)
    d = trace.decisions
    tiles = next(v for k, v in d.items() if k.startswith("gtile:"))
    assert tiles == [[2, 16, 1, 4], [2, 16, 1, 4]]  # 128 x 128, 2 x 2 pieces of 4 x 4
    assert next(v for k, v in d.items() if k.startswith("grtile:")) == [[16, 1]]
    assert sorted(v for k, v in d.items() if k.startswith("fvec:")) == [4, 4]
    assert next(v for k, v in d.items() if k.startswith("db:")) == 2
    kinds = [step.kind for step in trace.steps]
    assert kinds.count("double_buffer") == 2 and "storage_align" in kinds
    src = _source(task, trace)
    assert _launch(src) == (1024, 256)
    assert "float C_local[64]" in src.replace("C.local", "C_local")
    assert "tf_cp_async<16>" in src  # float4 copies into the next shared tile


def test_first_guess_fills_the_sms_with_smaller_tiles():
    for target, sms in ((TARGET, 132), ("cuda -arch=sm_80", 108)):
        task = SearchTask(matmul, (512, 512, 512), target)
        grid, threads = _launch(_source(task, first_guess(task)))
        assert grid >= sms and threads <= 1024
    task = SearchTask(matmul, (4096, 4096, 4096), TARGET)
    assert _launch(_source(task, first_guess(task)))[0] == 1024  # already enough 128 x 128 tiles


def test_fetch_widths_follow_the_shapes():
    task = SearchTask(matmul, (131, 67, 97), TARGET)  # no row of A or B holds whole float2s
    d = first_guess(task).decisions
    assert all(v == 1 for k, v in d.items() if k.startswith("fvec:"))
    task = SearchTask(matmul, (64, 6, 128), TARGET)  # k = 6: float2 rows of A, float4 of B
    d = first_guess(task).decisions
    assert sorted(v for k, v in d.items() if k.startswith("fvec:")) == [2, 4]


def test_fetch_widths_of_heads_read_as_rows():
    # x[b, k // 64, i, k % 64]: GPT-2's heads through transpose(1, 2).reshape, times W. A k
    # slice of 16 (or 32) stays in one head's row of 64: 16-byte fetches; one of 128 does not
    from tensorforge.tune.auto.sketch_gpu import fetch_widths

    x = te.placeholder((2, 4, 128, 64), name="x")
    w = te.placeholder((256, 96), name="w")
    k = te.reduce_axis((0, 256), name="k")
    y = te.compute(
        (2, 128, 96), lambda b, i, j: te.sum(x[b, k // 64, i, k % 64] * w[k, j], axis=k), name="y"
    )
    tiles = [[1, 1, 1, 1], [1, 16, 1, 4], [1, 16, 1, 4]]
    for slice_, widths in ((16, [1, 2, 4]), (32, [1, 2, 4]), (128, [1])):
        assert fetch_widths(y.op, x, tiles, [[slice_, 1]]) == widths, slice_


# (64, 769, 64): 48 double-buffered k slices of 16 and a peeled last one, whose tiles of the
# same names need their own barrier
ODD = [(1, 1, 1), (131, 67, 97), (1, 257, 33), (64, 6, 128), (130, 64, 36), (64, 769, 64)]
VARIANTS = [{}, {"db": 3, "pad": 0}, {"db": 1, "kunroll": False}]


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_gemm_sketch_variants_compile_on_odd_shapes(tmp_path):
    sources = []
    for shape in ODD:
        task = SearchTask(matmul, shape, TARGET)
        sources += [_source(task, _decisions(task, v)[0]) for v in VARIANTS]
        sources.append(_source(task, task.sample(5)))
    _nvcc(tmp_path, sources)


def test_double_buffer_steps_print_and_replay():
    task = SearchTask(matmul, (128, 64, 128), TARGET)
    trace = first_guess(task)
    code = task.to_python(trace)
    assert ".double_buffer(2)" in code
    scope = {"te": te, "tf": tf, task.workload_name: matmul}
    exec(code, scope)
    tensors = [scope[line] for line in code.splitlines()[0].split(" = ")[0].split(", ")]
    s2, tensors2 = task.instantiate(trace)
    with tf.target.Target(TARGET):
        a = str(tf.lower(scope["s"], tensors, simple_mode=True))
        b = str(tf.lower(s2, tensors2, simple_mode=True))
    assert a == b


@pytest.mark.cuda
@pytest.mark.parametrize("shape", ODD + [(256, 256, 256)])
def test_gemm_sketch_variants_match_numpy(shape):
    task = SearchTask(matmul, shape, "cuda")
    variants = VARIANTS
    if shape == (256, 256, 256):  # the 4096 first guess's tiles on a small GEMM
        variants = [{**v, "gtile": [[2, 16, 1, 4], [2, 16, 1, 4]]} for v in VARIANTS]
    rng = np.random.default_rng(sum(shape))
    n, k, m = shape
    a = rng.uniform(-1, 1, (n, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, m)).astype("float32")
    dev = tf.cuda(0)
    for fixed in variants:
        trace, used = _decisions(task, fixed)
        s, tensors = task.instantiate(trace)
        mod = tf.build(s, tensors, target=task.target)
        out = tf.nd.empty((n, m), "float32", dev)
        mod(tf.nd.array(a, dev), tf.nd.array(b, dev), out)
        np.testing.assert_allclose(out.numpy(), ref_matmul(a, b), rtol=2e-4, atol=2e-4)


def test_sampled_gemm_blocks_have_warps_and_fit_shared_memory():
    """Random samples are repaired: a block holds at least a warp (where the shape has room)
    and its shared tiles, all their copies, fit (before this, 12 of 40 samples of GEMM 4096
    needed more than a block may have and 12 ran blocks of fewer than 32 threads)."""
    task = SearchTask(matmul, (4096, 4096, 4096), TARGET)
    for seed in range(12):
        src = _source(task, task.sample(seed))
        grid, threads = _launch(src)
        shared = int(re.search(r"shared memory: (\d+) bytes", src).group(1))
        assert threads >= 32 and shared <= 64 * 1024, (seed, threads, shared)


def test_shared_tiles_of_a_reshaped_input_are_counted_as_read():
    """A (32, 128, 768) activation read as 4096 rows (`x[i // 128, i % 128, k]`, a linear on
    a batch of sequences): a 128-row block tile reads 2 x 128 of its rows at most, not 32 x
    128 (which halved the k slices to 2)."""
    from tensorforge.tune.auto.sketch_gpu import shared_bytes

    x = te.placeholder((32, 128, 768), name="x")
    w = te.placeholder((768, 2304), name="w")
    k = te.reduce_axis((0, 768), name="k")
    C = te.compute(
        (4096, 2304), lambda i, j: te.sum(x[i // 128, i % 128, k] * w[k, j], axis=k), name="C"
    )
    tiles, r_tiles = [[2, 16, 1, 4], [2, 16, 1, 4]], [[16, 1]]
    assert shared_bytes(C.op, [x, w], tiles, r_tiles) == 4 * (2 * 128 * 16 + 16 * 128)
