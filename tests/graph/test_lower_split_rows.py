"""Row operators of few long rows split in chunks (graph/lower_split_rows.py), built for this
CPU against eager: the CUDA form's chunk statistics and their combination are plain te, so their
indexing, tails and numerics are checked here (on the GPU: tests/graph/test_schedules_cuda.py)."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from tensorforge.graph import lower_reduce, lower_split_rows  # noqa: E402
from tensorforge.graph.lower_split_rows import Chunks, row_chunks  # noqa: E402
from tensorforge.target import Target  # noqa: E402
from tests.graph.test_lowering import check, rand, strict  # noqa: E402, F401 (strict: autouse)


def chunk_kernels(compiled) -> list:
    """The kernels of a compiled graph that compute chunk statistics."""
    return [s for s in compiled.steps if getattr(s, "spec", None) and "_chunks" in s.spec.name]


@pytest.fixture
def split_in(monkeypatch):
    """Force every row operator to split its rows in `chunks` (as on CUDA), on this CPU."""

    def force(chunks):
        def forced(target, rows, length, dtype):
            return Chunks.of(length, min(chunks, length))

        monkeypatch.setattr(lower_reduce, "row_chunks", forced)
        monkeypatch.setattr(lower_split_rows, "row_chunks", forced)

    return force


@pytest.mark.parametrize("chunks", [2, 4, 7, 128])  # 7 and 128: short last chunks
@pytest.mark.parametrize(
    "shape, groups", [((1, 64, 8, 8), 8), ((2, 6, 5, 7), 3), ((1, 13, 1, 1), 1), ((1, 4, 31), 2)]
)
def test_group_norm_from_chunks_matches_eager(split_in, chunks, shape, groups):
    split_in(chunks)
    x, w, b = rand(*shape, seed=1), rand(shape[1], seed=2), rand(shape[1], seed=3)

    def fn(x, w, b):
        return F.silu(F.group_norm(x, groups, w, b, eps=1e-5))

    compiled = check(fn, x, w, b, constants=(1, 2), rtol=2e-5)
    (kernel,) = chunk_kernels(compiled)
    length = x[0].numel() // groups
    count = Chunks.of(length, min(chunks, length)).count
    assert kernel.spec.out.shape[-2].value == count and kernel.spec.out.shape[-1].value == 2


def test_moments_of_data_far_from_zero_keep_fp32_rounding(split_in):
    # x = 1000 + noise: a sum of squares less the square of the sum would lose every digit
    # of the variance (1e6 * 2^-24 per term); chunk moments combined by Chan's formula do not
    split_in(16)
    x = 1000.0 + rand(1, 32, 64, 64, seed=4)

    def fn(x):
        return F.group_norm(x, 8, eps=1e-5), F.layer_norm(x.reshape(1, -1), (x.numel(),))

    compiled = check(fn, x, rtol=5e-5)
    assert len(chunk_kernels(compiled)) == 2
    assert [s.spec.anchor.info["row_block"] for s in compiled.steps[-2:]] == [1024, 1024]


@pytest.mark.parametrize("chunks", [3, 8])
@pytest.mark.parametrize("shape", [(1, 4099), (2, 3, 257), (1, 1, 1000)])  # 4099 is prime
def test_layer_norm_and_softmax_from_chunks_match_eager(split_in, chunks, shape):
    split_in(chunks)
    x, w, b = rand(*shape, seed=5) * 3, rand(shape[-1], seed=6), rand(shape[-1], seed=7)

    def fn(x, w, b):
        return (
            F.layer_norm(x, (shape[-1],), w, b),
            torch.softmax(x, -1),
            torch.log_softmax(x, -1) * 2.0,
        )

    compiled = check(fn, x, w, b, constants=(1, 2))
    assert len(chunk_kernels(compiled)) == 3


def test_softmax_chunks_that_are_all_minus_infinity_add_nothing(split_in):
    # a masked stretch of a long row (3 whole chunks of 4) and a row masked whole: SDPA's safe
    # softmax gives zeros there, softmax NaN, as torch does
    split_in(4)
    x = rand(3, 1000, seed=8)
    x[0, :750] = float("-inf")
    x[1, :] = float("-inf")

    def fn(x):
        return torch.softmax(x, -1), torch.ops.aten._safe_softmax(x, -1)

    compiled = check(fn, x)
    assert len(chunk_kernels(compiled)) == 2


@pytest.mark.parametrize("chunks", [5, 64])
def test_sums_and_means_along_long_rows_from_chunks_match_eager(split_in, chunks):
    split_in(chunks)
    x = rand(3, 7, 311, seed=9)

    def fn(x):
        return (
            x.sum(-1) * 2.0,  # an epilogue on the combined sums
            x.mean((1, 2), keepdim=True),
            x.mean(),
            torch.amax(x, -1, keepdim=True) - torch.amin(x, (1, 2))[:, None, None],
            x.sum(0),  # over a leading dimension: not split
        )

    compiled = check(fn, x)
    assert len(chunk_kernels(compiled)) == 5  # the amin over two dimensions is one of them


def test_row_chunks_split_few_long_rows_on_cuda_only():
    h100, t4, cpu = Target("cuda -arch=sm_90"), Target("cuda -arch=sm_75"), Target("llvm")
    # a UNet's group norms at batch 1: 8 rows of 8K and 64K terms; one softmax row of 64K
    assert row_chunks(h100, (1, 8), 8192, "float32").count == 16
    assert row_chunks(h100, (1, 8), 65536, "float32").count == 128
    assert row_chunks(h100, (1,), 65536, "float32").count == 128
    assert row_chunks(t4, (1, 8), 65536, "float32").count == 64  # 288 blocks fill 72 SMs
    prime = row_chunks(h100, (8,), 4099, "float32")  # 8 chunks of 513, the last 508
    assert (prime.count, prime.length) == (8, 513)
    assert row_chunks(h100, (1, 8), 1000, "float32") is None  # too short to split
    assert row_chunks(h100, (128,), 512, "float32") is None  # LLaMA's RMSNorm rows
    assert row_chunks(h100, (1024,), 65536, "float32") is None  # rows fill the GPU
    assert row_chunks(h100, (1, 8), 65536, "float16") is None
    assert row_chunks(cpu, (1, 8), 65536, "float32") is None
    for rows, length in [((1, 8), 65536), ((3,), 100003), ((1,), 1 << 20)]:
        chunks = row_chunks(h100, rows, length, "float32")
        assert chunks.count * chunks.length >= length > (chunks.count - 1) * chunks.length
        assert chunks.length >= 512 and chunks.count <= 128
