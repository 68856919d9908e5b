"""When CUDA products and convolutions split their reduction (graph/split_k.py); the split
forms themselves: tests/graph/test_lower_conv_gemm.py and test_tensor_core.py."""

from tensorforge.graph.split_k import (
    MIN_SPLIT_TERMS,
    cuda_conv_splits,
    cuda_matmul_splits,
    splits_to_fill,
)
from tensorforge.target import Target


def test_cuda_conv_splits_only_convolutions_of_few_outputs():
    cuda, cpu = Target("cuda -arch=sm_90"), Target("llvm")
    assert cuda_conv_splits(cuda, (1, 512, 7, 7), 512, 9, "float32") == 32
    assert cuda_conv_splits(cuda, (1, 256, 14, 14), 256, 9, "float32") == 16
    assert cuda_conv_splits(cuda, (1, 256, 14, 14), 128, 1, "float32") == 2
    assert cuda_conv_splits(cuda, (1, 64, 56, 56), 64, 9, "float32") == 0  # outputs enough
    assert cuda_conv_splits(cuda, (1, 512, 7, 7), 67, 9, "float32") == 0  # odd terms
    assert cuda_conv_splits(cuda, (1, 512, 7, 7), 64, 1, "float32") == 0  # too few terms
    assert cuda_conv_splits(cuda, (1, 512, 7, 7), 512, 9, "float16") == 0
    assert cuda_conv_splits(cpu, (1, 512, 7, 7), 512, 9, "float32") == 0
    assert cuda_conv_splits(cuda, (1, 64, 112, 112), 3, 49, "float32") == 1  # an image stem
    assert cuda_conv_splits(cuda, (1, 6, 28, 28), 1, 25, "float32") == 0  # LeNet's 6 filters
    assert cuda_conv_splits(cuda, (64, 64, 112, 112), 3, 49, "float32") == 0  # 514 MB columns
    for channels in (64, 72, 128, 512, 4096):  # 72 x 9 = 648 terms: 2 slices of 324
        terms = channels * (9 if channels < 4096 else 1)
        splits = cuda_conv_splits(cuda, (1, 64, 7, 7), channels, terms // channels, "float32")
        assert splits > 1, channels
        part = terms // splits
        assert part * splits == terms and part % 4 == 0 and part >= MIN_SPLIT_TERMS


def test_cuda_matmul_splits_only_products_of_few_tiles_and_enough_work():
    cuda = Target("cuda -arch=sm_90")
    assert cuda_matmul_splits(cuda, (1, 128, 2304), 768, "float32") == 2  # GPT-2's QKV
    assert cuda_matmul_splits(cuda, (1, 128, 768), 3072, "float32") == 8  # its fc2
    assert cuda_matmul_splits(cuda, (1, 128, 768), 768, "float32") == 0  # 0.15 GFLOP
    assert cuda_matmul_splits(cuda, (64, 3072), 768, "float32") == 0  # an MLP at 64 rows
    assert cuda_matmul_splits(cuda, (100, 3072), 1536, "float32") == 0  # rows no 64-tiles
    assert cuda_matmul_splits(cuda, (1024, 1024), 1024, "float32") == 0  # tiles enough
    assert cuda_matmul_splits(cuda, (2048, 2048), 2048, "float32") == 0  # staged whole
    assert cuda_matmul_splits(Target("llvm"), (1, 128, 2304), 768, "float32") == 0


def test_splits_to_fill_keep_whole_aligned_slices():
    assert splits_to_fill(8, 4608, 132, 4) == 32  # 8 tiles x 32 slices: 256 >= 132 SMs
    assert splits_to_fill(200, 4608, 132, 4) == 0  # the tiles fill the SMs: one slice
    assert splits_to_fill(1, 192, 132, 64) == 0  # halves of 96 terms: not whole 64s
    assert splits_to_fill(1, 192, 132, 16) == 2  # quarters would be under MIN_SPLIT_TERMS
    assert splits_to_fill(1, 4099, 132, 1) == 0  # a prime: no halves
    assert splits_to_fill(1, 8192, 132, 32) == 128  # down to MIN_SPLIT_TERMS a slice
    assert 8192 // 128 == MIN_SPLIT_TERMS
