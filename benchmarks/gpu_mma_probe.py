"""Probes for the tensor-core GEMM on the GPU machine.

python benchmarks/gpu_mma_probe.py peak   # mma.sync.m16n8k16 f16->f32 issue ceiling (no memory)
python benchmarks/gpu_mma_probe.py once   # one launch of the default fp16 GEMM 4096^3 (for ncu)
"""

from __future__ import annotations

import sys

PEAK_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256) mma_peak(float* out, int iters) {
  unsigned a[4], b[2];
  float acc[16][4];
  const unsigned seed = threadIdx.x * 2654435761u;
  for (int i = 0; i < 4; ++i) a[i] = seed ^ (0x3c003c00u + i);
  for (int i = 0; i < 2; ++i) b[i] = seed ^ (0x3c003c00u + 7 * i);
  for (int t = 0; t < 16; ++t)
    for (int i = 0; i < 4; ++i) acc[t][i] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int t = 0; t < 16; ++t)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                   "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                   : "+f"(acc[t][0]), "+f"(acc[t][1]), "+f"(acc[t][2]), "+f"(acc[t][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float s = 0.f;
  for (int t = 0; t < 16; ++t)
    for (int i = 0; i < 4; ++i) s += acc[t][i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""


def peak() -> None:
    import numpy as np
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    mod = SourceModule(PEAK_SOURCE, no_extern_c=True, arch="sm_90", options=["-O3"])
    fn = mod.get_function("mma_peak")
    for blocks_per_sm, threads in ((1, 256), (2, 256), (4, 128), (2, 128)):
        blocks = 132 * blocks_per_sm
        out = cuda.mem_alloc(blocks * threads * 4)
        iters = 4096
        fn(out, np.int32(iters), block=(threads, 1, 1), grid=(blocks, 1))
        start, end = cuda.Event(), cuda.Event()
        start.record()
        fn(out, np.int32(iters), block=(threads, 1, 1), grid=(blocks, 1))
        end.record()
        end.synchronize()
        seconds = start.time_till(end) / 1e3
        flops = blocks * (threads // 32) * iters * 16 * 2 * 16 * 8 * 16
        print(
            f"mma.sync peak: {blocks} blocks x {threads} threads: {flops / seconds / 1e12:.1f} TFLOP/s"
        )


INNER_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(128) mma_inner(half* out, int iters, int stride) {
  __shared__ __align__(16) half a[2][128 * 40];
  __shared__ __align__(16) half b[2][32 * 136];
  for (int i = threadIdx.x + 32 * threadIdx.y; i < 2 * 128 * 40; i += 128)
    (&a[0][0])[i] = __float2half(0.001f * (i % 7));
  for (int i = threadIdx.x + 32 * threadIdx.y; i < 2 * 32 * 136; i += 128)
    (&b[0][0])[i] = __float2half(0.001f * (i % 5));
  __syncthreads();
  float acc[128];
  tf_mma_fill_zero<64, 64>(acc);
  const int w = threadIdx.y;
  for (int it = 0; it < iters; ++it) {
    const int s = it % 2;
    tf_mma_sync<64, 64, 32>(acc, &a[s][(w / 2) * 64 * 40], 40, &b[s][(w % 2) * 64], 136);
    if (stride) __syncthreads();
  }
  tf_mma_store<64, 64>(out + blockIdx.x * 128 * 128 + (w / 2) * 64 * 128 + (w % 2) * 64, 128, acc);
}
"""


def inner() -> None:
    """tf_mma_sync<64, 64, 32> over shared tiles that never change: the ldmatrix + mma loop's
    own ceiling (with and without a barrier per call), no global memory."""
    import numpy as np
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    from tensorforge.ops.tensor_core import DEVICE_SOURCE

    mod = SourceModule(
        DEVICE_SOURCE + INNER_SOURCE, no_extern_c=True, arch="sm_90", options=["-O3"]
    )
    fn = mod.get_function("mma_inner")
    for blocks_per_sm in (2, 3):
        for sync in (0, 1):
            blocks = 132 * blocks_per_sm
            out = cuda.mem_alloc(blocks * 128 * 128 * 2)
            iters = 2048
            fn(out, np.int32(iters), np.int32(sync), block=(32, 4, 1), grid=(blocks, 1))
            start, end = cuda.Event(), cuda.Event()
            start.record()
            fn(out, np.int32(iters), np.int32(sync), block=(32, 4, 1), grid=(blocks, 1))
            end.record()
            end.synchronize()
            seconds = start.time_till(end) / 1e3
            flops = blocks * 2.0 * 128 * 128 * 32 * iters
            print(
                f"ldmatrix+mma loop: {blocks_per_sm} blocks/SM, barrier {bool(sync)}: "
                f"{flops / seconds / 1e12:.1f} TFLOP/s"
            )


WIDE_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256, 1) mma_wide(half* out, int iters) {
  __shared__ __align__(16) half a[128 * 40];
  __shared__ __align__(16) half b[32 * 264];
  for (int i = threadIdx.x + 32 * threadIdx.y; i < 128 * 40; i += 256)
    a[i] = __float2half(0.001f * (i % 7));
  for (int i = threadIdx.x + 32 * threadIdx.y; i < 32 * 264; i += 256)
    b[i] = __float2half(0.001f * (i % 5));
  __syncthreads();
  float acc[128];
  tf_mma_fill_zero<64, 64>(acc);
  const int w = threadIdx.y;
  for (int it = 0; it < iters; ++it)
    tf_mma_sync<64, 64, 32>(acc, &a[(w / 4) * 64 * 40], 40, &b[(w % 4) * 64], 264);
  tf_mma_store<64, 64>(out + blockIdx.x * 128 * 256 + (w / 4) * 64 * 256 + (w % 4) * 64, 256, acc);
}
"""


def wide() -> None:
    """The GEMM's block shape (128 x 256, 8 warps of 64 x 64, one block an SM) on shared tiles
    that never change: the ldmatrix + mma ceiling of the default schedule, no memory."""
    import numpy as np
    import pycuda.autoinit  # noqa: F401
    import pycuda.driver as cuda
    from pycuda.compiler import SourceModule

    from tensorforge.ops.tensor_core import DEVICE_SOURCE

    mod = SourceModule(DEVICE_SOURCE + WIDE_SOURCE, no_extern_c=True, arch="sm_90", options=["-O3"])
    fn = mod.get_function("mma_wide")
    blocks, iters = 132, 4096
    out = cuda.mem_alloc(blocks * 128 * 256 * 2)
    fn(out, np.int32(iters), block=(32, 8, 1), grid=(blocks, 1))
    start, end = cuda.Event(), cuda.Event()
    start.record()
    fn(out, np.int32(iters), block=(32, 8, 1), grid=(blocks, 1))
    end.record()
    end.synchronize()
    flops = blocks * 2.0 * 128 * 256 * 32 * iters
    seconds = start.time_till(end) / 1e3
    print(f"ldmatrix+mma loop 128x256, 8 warps, 1 block/SM: {flops / seconds / 1e12:.1f} TFLOP/s")


def once() -> None:
    import numpy as np

    import tensorforge as tf
    from tensorforge.ops.gemm_fp16 import schedule_gemm_fp16

    n = 4096
    s, args = schedule_gemm_fp16(n, n, n)
    mod = tf.build(s, args, target="cuda")
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    A = tf.nd.array(rng.uniform(-1, 1, (n, n)).astype("float16"), dev)
    B = tf.nd.array(rng.uniform(-1, 1, (n, n)).astype("float16"), dev)
    D = tf.nd.empty((n, n), "float16", dev)
    mod(A, B, D)
    mod(A, B, D)
    dev.sync() if hasattr(dev, "sync") else None


if __name__ == "__main__":
    {"peak": peak, "once": once, "inner": inner, "wide": wide}[sys.argv[1]]()
