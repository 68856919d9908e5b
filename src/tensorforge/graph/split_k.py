"""When a CUDA product or convolution is split over its reduction (split-K: lower_conv_gemm's
partial products and their sum, lower_tensor_core's slices): products and convolutions whose
output tiles leave SMs idle, in a power of two of slices until the tiles cover the SMs once."""

from __future__ import annotations

from tensorforge.graph.schedules_cuda import STAGED_GEMM_FLOP
from tensorforge.graph.values import is_static, numel
from tensorforge.ops.matmul import round_up
from tensorforge.tune.auto.analytic_gpu import K_SLICE

# split-K convolutions (lower_conv_gemm): where a direct schedule's outputs are this few, and
# the slices that fill the GPU still reduce this many terms each. H200, ResNet-18 at batch 1,
# direct -> split-K partial products (+ the columns and the sum, ~2-3 and ~1.5 us):
#   3 x 3 at 7 x 7 x 512 45.6 -> 13.3 us, its strided first conv 41.0 -> 12.5;
#   3 x 3 at 14 x 14 x 256 16.9 -> 13.2, at 28 x 28 x 128 18.4 -> 12.5;
#   the 1 x 1 downsamples at 7 x 7 and 14 x 14 31.0 -> 5.5 and 26.2 -> 5.0;
#   but at 56 x 56 x 64 (2^18 outputs) 16.4 -> 12.4 + 4.9 for the columns: no gain.
# The whole model 0.506 -> 0.333 ms (2^15 outputs, the last stage only: 0.345).
SPLIT_CONV_OUTPUTS = 1 << 17
MIN_SPLIT_TERMS = 64
SPLIT_CONV_TILE = 64  # the first guess's block tile on such products, both sides padded to it
STEM_CHANNELS = 4
STEM_COLUMNS = 1 << 23  # elements of a stem's im2col columns (ResNet's at batch 1: 2M)


def cuda_conv_splits(target, shape, channels: int, window: int, dtype: str) -> int:
    """Slices of the reduction for a split-K convolution on CUDA (lower_conv_gemm), or 0 for
    the direct schedule: convolutions of few outputs (ResNet's last stage: 512 filters x 7 x 7
    positions make 8 tiles of 64 x 64 for 132 SMs) over many terms, split in a power of two
    whose slices keep whole float4 rows and at least MIN_SPLIT_TERMS terms, until their tiles
    cover the SMs once (ResNet-18 0.327 ms; slices for half the SMs 0.445, for twice 0.372).
    Image stems (a few input channels under a wide window: a direct thread's
    reduction is short) are one staged product: ResNet's 3 x 7 x 7 at 112 x 112, 28.3 us direct
    (+ 2.1 padding), 13.9 staged (+ 5.8 columns, 3.1 epilogue); the model 0.336 -> 0.329 ms."""
    if target.kind != "cuda" or dtype != "float32" or not is_static(shape):
        return 0
    N, F, OH, OW = shape
    terms = channels * window
    if channels <= STEM_CHANNELS and window > 1:
        # padded to whole 64-filter tiles and laid out as columns: not for a few filters
        # (LeNet's 6 would do 10x the work) nor columns past STEM_COLUMNS (a batch of 64 at
        # 224 x 224: 514 MB)
        columns = N * round_up(terms, K_SLICE) * OH * OW
        return 1 if F >= SPLIT_CONV_TILE // 2 and columns <= STEM_COLUMNS else 0
    if N * F * OH * OW > SPLIT_CONV_OUTPUTS or terms < 2 * MIN_SPLIT_TERMS:
        return 0
    tiles = N * -(-F // SPLIT_CONV_TILE) * -(-(OH * OW) // SPLIT_CONV_TILE)
    return splits_to_fill(tiles, terms, target.sm_count, 4)  # whole float4 rows a slice


# products of few tiles from this many FLOP on as split-K staged products (lower_conv_gemm):
# H200, GPT-2 block at 128 tokens 0.141 -> 0.130 ms (QKV, fc1, fc2 at 0.45-0.6 GFLOP: 36.6,
# 34.3, 39.1 -> 30.7, 30.6, 30.4 us + ~2 for each sum); an MLP at 64 rows (0.3 GFLOP a product)
# 0.045 -> 0.058 ms: its GPU time fell 6 us, but two more kernels cost more on the host
SPLIT_MATMUL_FLOP = 0.4e9


def cuda_matmul_splits(target, shape, k, dtype: str) -> int:
    """Slices of k for a split-K product on CUDA (lower_conv_gemm.matmul_split_k), or 0 for
    the register tiles: a static product of SPLIT_MATMUL_FLOP up to STAGED_GEMM_FLOP whose
    sides are whole 64-tiles (no guarded tail) and whose tiles leave SMs idle, split as a
    convolution's, each slice whole 16-term shared slices."""
    if target.kind != "cuda" or dtype != "float32" or not is_static(shape):
        return 0
    *lead, n, m = shape
    flop = 2 * numel(shape) * k if isinstance(k, int) else 0
    if (
        n % SPLIT_CONV_TILE
        or m % SPLIT_CONV_TILE
        or not SPLIT_MATMUL_FLOP <= flop < STAGED_GEMM_FLOP
    ):
        return 0
    tiles = numel(lead) * (n // SPLIT_CONV_TILE) * (m // SPLIT_CONV_TILE)
    return splits_to_fill(tiles, k, target.sm_count, K_SLICE)


def splits_to_fill(tiles: int, terms: int, sm_count: int, align: int) -> int:
    """Slices of `terms` (a power of two, each a multiple of `align` of at least
    MIN_SPLIT_TERMS) doubled until `tiles` of them cover the SMs once; 0 for one slice."""
    splits = 1
    while tiles * splits < sm_count:
        part = terms // (2 * splits)
        if terms % (2 * splits) or part < MIN_SPLIT_TERMS or part % align:
            break
        splits *= 2
    return splits if splits > 1 else 0
