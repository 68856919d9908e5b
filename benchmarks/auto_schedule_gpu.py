"""Auto-scheduling on the GPU: GEMM 4096^3 fp32 scheduled by `tune.auto` (no template) beside
ops' hand schedule and cuBLAS (TF32 off), in one process.

Rows: the first guess (no measurement), the best of TRIALS auto-scheduler trials measured on
this GPU, `ops.cuda.schedule_matmul_cuda`, cuBLAS through torch. Then direct 3 x 3 convolutions
at ResNet-18's four stages (batch 1, an input padded already): the first guess beside cuDNN.

Run on the GPU machine: python benchmarks/auto_schedule_gpu.py [--size 4096] [--trials 32]
                        [--no-convs]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from gpu import ours_time, torch_time  # benchmarks/gpu.py: the script's folder is on sys.path

import tensorforge as tf
from tensorforge import te, tune
from tensorforge.ops.cuda import schedule_matmul_cuda
from tensorforge.tune import auto


@auto.register_workload
def gpu_conv3x3(n, c, h, w, f):
    X = te.placeholder((n, c, h + 2, w + 2), name="X")
    W = te.placeholder((f, c, 3, 3), name="W")
    rc = te.reduce_axis((0, c), name="rc")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    Y = te.compute(
        (n, f, h, w),
        lambda b, o, y, x: te.sum(X[b, rc, y + ry, x + rx] * W[o, rc, ry, rx], axis=[rc, ry, rx]),
        name="Y",
    )
    return [X, W, Y]


CONV_SHAPES = [(1, 64, 56, 56, 64), (1, 128, 28, 28, 128), (1, 256, 14, 14, 256),
               (1, 512, 7, 7, 512)]  # fmt: skip


def conv_rows() -> None:
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.allow_tf32 = False
    dev = tf.cuda(0)
    print(f"\n{torch.cuda.get_device_name()} | conv2d 3x3 fp32 (first guess), TF32 off")
    print(f"{'shape (n, c, h, w, f)':28} {'guess (us)':>10} {'cuDNN (us)':>10} {'vs cuDNN':>9}")
    for shape in CONV_SHAPES:
        n, c, h, w, f = shape
        x = torch.randn(n, c, h + 2, w + 2, device="cuda")
        k = torch.randn(f, c, 3, 3, device="cuda") / (9 * c) ** 0.5
        expected = F.conv2d(x, k).cpu().numpy()
        task = auto.SearchTask(func=gpu_conv3x3, args=shape, target="cuda")
        s, tensors = task.default_schedule()
        mod = tf.build(s, tensors, target="cuda")
        arrays = [tf.nd.array(x.cpu().numpy(), dev), tf.nd.array(k.cpu().numpy(), dev)]
        arrays.append(tf.nd.empty(expected.shape, "float32", dev))
        mod(*arrays)
        np.testing.assert_allclose(arrays[2].numpy(), expected, rtol=1e-3, atol=1e-3)
        ours, cudnn = ours_time(mod, arrays), torch_time(lambda x=x, k=k: F.conv2d(x, k))
        print(f"{str(shape):28} {ours * 1e6:10.1f} {cudnn * 1e6:10.1f} {cudnn / ours:8.2f}x")


@auto.register_workload
def gpu_gemm(n, m, k):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [A, B, C]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--no-convs", action="store_true", help="the GEMM rows only")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    n = args.size
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    expected = (ta @ tb).cpu().numpy()
    dev = tf.cuda(0)
    arrays = [tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.empty((n, n), "float32", dev)]
    flop = 2.0 * n**3
    rows = []

    def measure(name, s, tensors, extra=""):
        mod = tf.build(s, tensors, target="cuda")
        arrays[2] = tf.nd.empty((n, n), "float32", dev)
        mod(*arrays)
        np.testing.assert_allclose(arrays[2].numpy(), expected, rtol=1e-3, atol=1e-2 * n**0.5)
        rows.append((name, ours_time(mod, arrays), extra))

    task = auto.SearchTask(func=gpu_gemm, args=(n, n, n), target="cuda")
    start = time.perf_counter()
    s, tensors = task.default_schedule()
    guess_s = time.perf_counter() - start
    measure("auto first guess", s, tensors, f"made in {guess_s:.2f} s")

    log = os.path.join(tempfile.mkdtemp(), "auto_gpu.jsonl")
    start = time.perf_counter()
    option = tune.measure_option(number=3, repeat=3, timeout=30)
    task.tune(trials=args.trials, log=log, seed=0, measure_option=option)
    tune_s = time.perf_counter() - start
    s, tensors = task.apply_best(log)
    measure(f"auto tuned ({args.trials} trials)", s, tensors, f"search {tune_s:.0f} s")

    s, tensors = schedule_matmul_cuda(n, n, n)
    measure("ops hand schedule", s, tensors)
    cublas = torch_time(lambda: torch.matmul(ta, tb))
    rows.append(("cuBLAS", cublas, ""))

    print(f"\n{torch.cuda.get_device_name()} | GEMM {n}^3 fp32, TF32 off")
    print(f"{'impl':28} {'time (us)':>10} {'TFLOP/s':>8} {'vs cuBLAS':>10}  note")
    for name, seconds, extra in rows:
        rate = flop / seconds / 1e12
        print(f"{name:28} {seconds * 1e6:10.1f} {rate:8.1f} {cublas / seconds:9.2f}x  {extra}")
    if not args.no_convs:
        conv_rows()


if __name__ == "__main__":
    main()
