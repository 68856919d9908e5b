"""GPU benchmarks on one run: GEMM vs cuBLAS (TF32 off), the element-wise chain and row softmax vs
torch eager and torch.compile, all against a device-to-device copy's bandwidth.

Run on the GPU machine: python benchmarks/gpu.py [--json out.jsonl] [--quick]
"""

from __future__ import annotations

import json
import sys

import numpy as np

import tensorforge as tf
from tensorforge.ops import fused_chain
from tensorforge.ops.cuda import (
    schedule_elementwise_cuda,
    schedule_matmul_cuda,
    schedule_softmax_cuda,
)


def torch_time(fn, repeat=20) -> float:
    import torch

    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return float(np.median(times))


def ours_time(mod, arrays) -> float:
    return mod.time_evaluator(mod.entry_name, tf.cuda(0), number=10, repeat=5)(*arrays).median


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    quick = "--quick" in sys.argv
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    rows = []

    # copy bandwidth: the roof for memory-bound kernels (a large copy, so caches do not flatter it)
    n = 4096
    big = torch.randn(8192, 8192, device="cuda")
    big_out = torch.empty_like(big)
    copy_s = torch_time(lambda big=big, out=big_out: out.copy_(big))
    copy_gbs = 2 * big.numel() * 4 / copy_s / 1e9
    rows.append(
        dict(case="copy 8192^2", impl="torch copy_", seconds=copy_s, rate=copy_gbs, unit="GB/s")
    )
    del big, big_out

    # GEMM
    for size in [1024] if quick else [1024, 4096]:
        a = rng.uniform(-1, 1, (size, size)).astype("float32")
        b = rng.uniform(-1, 1, (size, size)).astype("float32")
        s, args = schedule_matmul_cuda(size, size, size)
        mod = tf.build(s, args, target="cuda")
        A, B, C = (
            tf.nd.array(a, dev),
            tf.nd.array(b, dev),
            tf.nd.empty((size, size), "float32", dev),
        )
        mod(A, B, C)
        ref = a.astype("float64") @ b.astype("float64")
        err = np.linalg.norm(C.numpy() - ref) / np.linalg.norm(ref)
        assert err < 1e-5, f"gemm {size}: relative error {err}"
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        flops = 2.0 * size**3
        ours = ours_time(mod, [A, B, C])
        cublas = torch_time(lambda ta=ta, tb=tb: ta @ tb)
        rows.append(
            dict(
                case=f"gemm {size}^3",
                impl="tensorforge",
                seconds=ours,
                rate=flops / ours / 1e12,
                unit="TFLOP/s",
                vs=cublas / ours,
                vs_name="cuBLAS",
            )
        )
        rows.append(
            dict(
                case=f"gemm {size}^3",
                impl="cuBLAS",
                seconds=cublas,
                rate=flops / cublas / 1e12,
                unit="TFLOP/s",
            )
        )

    # element-wise chain and softmax: ours vs torch eager vs torch.compile
    xa = rng.standard_normal((n, n)).astype("float32")
    X, Y = tf.nd.array(xa, dev), tf.nd.empty((n, n), "float32", dev)
    xt = torch.from_numpy(xa).cuda()
    moved = 2 * xa.nbytes

    def chain_eager(t):
        return torch.sigmoid(torch.relu(t) * 2 + 1)

    def softmax_eager(t):
        return torch.softmax(t, dim=1)

    x, y = fused_chain(n, n)
    cases = [
        (
            "chain sigmoid(relu(x)*2+1)",
            tf.build(schedule_elementwise_cuda(y), [x, y], target="cuda"),
            chain_eager,
            lambda v: 1 / (1 + np.exp(-(np.maximum(v, 0) * 2 + 1))),
        ),
    ]
    s, args = schedule_softmax_cuda(n, n)
    cases.append(
        (
            "row softmax",
            tf.build(s, args, target="cuda"),
            softmax_eager,
            lambda v: (
                np.exp(v - v.max(1, keepdims=True))
                / np.exp(v - v.max(1, keepdims=True)).sum(1, keepdims=True)
            ),
        )
    )
    for name, mod, eager, reference in cases:
        mod(X, Y)
        np.testing.assert_allclose(Y.numpy(), reference(xa), rtol=1e-4, atol=1e-6)
        ours = ours_time(mod, [X, Y])
        eager_s = torch_time(lambda eager=eager: eager(xt))
        compiled = torch.compile(eager)
        compiled_s = torch_time(lambda compiled=compiled: compiled(xt))
        rows.append(
            dict(
                case=name,
                impl="tensorforge",
                seconds=ours,
                rate=moved / ours / 1e9,
                unit="GB/s",
                vs=compiled_s / ours,
                vs_name="torch.compile",
                of_copy=moved / ours / 1e9 / copy_gbs,
            )
        )
        rows.append(
            dict(
                case=name,
                impl="torch eager",
                seconds=eager_s,
                rate=moved / eager_s / 1e9,
                unit="GB/s",
            )
        )
        rows.append(
            dict(
                case=name,
                impl="torch.compile",
                seconds=compiled_s,
                rate=moved / compiled_s / 1e9,
                unit="GB/s",
                of_copy=moved / compiled_s / 1e9 / copy_gbs,
            )
        )

    if "--json" in sys.argv:
        path = sys.argv[sys.argv.index("--json") + 1]
        with open(path, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__} | TF32 off")
    print(
        f"{'case':<28} {'impl':<14} {'time (us)':>10} {'rate':>9} {'unit':<8} {'speedup':>16} {'of copy':>8}"
    )
    for r in rows:
        vs = f"{r['vs']:6.2f}x {r['vs_name']}" if "vs" in r else ""
        of_copy = f"{r['of_copy']:8.2f}" if "of_copy" in r else ""
        print(
            f"{r['case']:<28} {r['impl']:<14} {r['seconds'] * 1e6:10.1f} {r['rate']:9.1f} {r['unit']:<8} "
            f"{vs:>16} {of_copy}"
        )


if __name__ == "__main__":
    main()
