"""Auto-scheduling on the GPU: GEMM 4096^3 fp32 scheduled by `tune.auto` (no template) beside
ops' hand schedule and cuBLAS (TF32 off), in one process.

Rows: the first guess (no measurement), the best of TRIALS auto-scheduler trials measured on
this GPU, `ops.cuda.schedule_matmul_cuda`, cuBLAS through torch.

Run on the GPU machine: python benchmarks/auto_schedule_gpu.py [--size 4096] [--trials 32]
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


if __name__ == "__main__":
    main()
