"""Tutorial 5: a shared-memory tiled matmul on an NVIDIA GPU, built step by step.

bind -> cache_read into shared + compute_at -> register tile (cache_write "local")
-> vectorized (float4) cooperative loads -> unrolled inner loops

Each step prints TFLOP/s beside cuBLAS (through torch, TF32 off) in the same run. Without a GPU
it builds every step for sm_90 and prints the final CUDA C instead.

Run: python tutorials/05_cuda_matmul.py [--small]
"""

import sys

import numpy as np

import tensorforge as tf
from tensorforge import te

SMALL = "--small" in sys.argv
N = 256 if SMALL else 4096
HAVE_GPU = tf.cuda(0).exist
TARGET = "cuda" if HAVE_GPU else "cuda -arch=sm_90"


def declare():
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def step_bind():
    """1. One thread per output element, 16x16 threads per block."""
    A, B, C = declare()
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(*C.op.axis, 16, 16)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def step_shared():
    """2. Stage 16x16 tiles of A and B in shared memory; every thread loads one element of each."""
    A, B, C = declare()
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    io, jo, ii, ji = s[C].tile(*C.op.axis, 16, 16)
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, factor=16)
    s[C].reorder(io, jo, ii, ji, ko, ki)
    tx, ty = te.thread_axis("threadIdx.x"), te.thread_axis("threadIdx.y")
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, ty)
    s[C].bind(ji, tx)
    for cache in (AA, BB):
        s[cache].compute_at(s[C], ko)
        r, c = s[cache].op.axis
        s[cache].bind(r, te.thread_axis("threadIdx.y"))
        s[cache].bind(c, te.thread_axis("threadIdx.x"))
    return s, [A, B, C]


def step_register_tile(vector=1, unroll=False):
    """3-5. 128x128 block tile, 8x8 accumulators per thread in registers (cache_write "local"),
    operands copied from shared memory into registers, cooperative loads `vector` wide."""
    from tensorforge.ops.cuda import schedule_matmul_cuda

    block = 64 if SMALL else 128
    s, args = schedule_matmul_cuda(N, N, N, block=block, thread_tile=8, k_tile=8, vector=vector)
    if not unroll:  # undo the unrolling the library schedule asks for, to show what it buys
        for stage in s.stages:
            for attr in stage.iter_attrs.values():
                if attr.kind.value == "unrolled":
                    attr.kind = type(attr.kind).SERIAL
    return s, args


STEPS = [
    ("bind", step_bind),
    ("shared memory tiles", step_shared),
    ("register tile", lambda: step_register_tile(vector=1, unroll=False)),
    ("float4 loads", lambda: step_register_tile(vector=4, unroll=False)),
    ("unrolled", lambda: step_register_tile(vector=4, unroll=True)),
]


def cublas_tflops(a, b):
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(3):
        ta @ tb
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        ta @ tb
    end.record()
    torch.cuda.synchronize()
    return 2 * N**3 / (start.elapsed_time(end) / 10 / 1e3) / 1e12


def main():
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (N, N)).astype("float32")
    b = rng.uniform(-1, 1, (N, N)).astype("float32")
    if HAVE_GPU:
        dev = tf.cuda(0)
        A, B = tf.nd.array(a, dev), tf.nd.array(b, dev)
        expected = (a.astype("float64") @ b.astype("float64")).astype("float32")
        reference = cublas_tflops(a, b)
    rows = []
    for title, make in STEPS:
        s, args = make()
        mod = tf.build(s, args, target=TARGET)
        if not HAVE_GPU:
            rows.append((title, None))
            continue
        C = tf.nd.empty((N, N), "float32", dev)
        mod(A, B, C)
        np.testing.assert_allclose(C.numpy(), expected, rtol=2e-3, atol=2e-3)
        seconds = mod.time_evaluator(mod.entry_name, dev, number=5, repeat=3)(A, B, C).median
        rows.append((title, 2 * N**3 / seconds / 1e12))
    print("final step's CUDA C:\n")
    print(mod.get_source("cuda"))
    print(f"\nfloat32 matmul {N}^3 on {'the GPU' if HAVE_GPU else 'no GPU (built for sm_90 only)'}")
    for title, tflops in rows:
        if tflops is None:
            print(f"{title:<22} built")
        else:
            ref = (
                f"   cuBLAS {reference:6.1f} TFLOP/s   ratio {tflops / reference:5.2f}"
                if reference
                else ""
            )
            print(f"{title:<22} {tflops:6.2f} TFLOP/s{ref}")


if __name__ == "__main__":
    main()
