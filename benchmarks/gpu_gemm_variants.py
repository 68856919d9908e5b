"""Try several GPU GEMM schedule configurations in one run (block tile, thread tile, k tile, unroll).

Run on the GPU machine: python benchmarks/gpu_gemm_variants.py [size]
"""

import sys

import numpy as np

import tensorforge as tf
from tensorforge.ops.cuda import schedule_matmul_cuda


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    A, B = tf.nd.array(a, dev), tf.nd.array(b, dev)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ref = (ta.double() @ tb.double()).cpu().numpy()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(3):
        ta @ tb
    start.record()
    for _ in range(20):
        ta @ tb
    end.record()
    torch.cuda.synchronize()
    cublas = 2 * n**3 / (start.elapsed_time(end) / 20 / 1e3) / 1e12
    print(f"cuBLAS {cublas:.1f} TFLOP/s")
    configs = [
        (128, 8, 16, True, False),
        (128, 8, 16, True, True),
        (128, 8, 8, True, False),
        (128, 8, 32, True, False),
        (64, 8, 16, True, False),
    ]
    for block, tile, ktile, unroll, double in configs:
        s, args = schedule_matmul_cuda(
            n,
            n,
            n,
            block=block,
            thread_tile=tile,
            k_tile=ktile,
            unroll=unroll,
            double_buffer=double,
        )
        mod = tf.build(s, args, target="cuda")
        C = tf.nd.empty((n, n), "float32", dev)
        mod(A, B, C)
        err = np.linalg.norm(C.numpy() - ref) / np.linalg.norm(ref)
        secs = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=3)(A, B, C).median
        tflops = 2 * n**3 / secs / 1e12
        print(
            f"block {block} tile {tile} ktile {ktile:2d} unroll {unroll!s:5} double_buffer {double!s:5}: {tflops:6.1f} TFLOP/s "
            f"({tflops / cublas:.2f}x cuBLAS) err {err:.1e}"
        )


if __name__ == "__main__":
    main()
