"""The wgmma GEMM's tile fills side by side on the GPU machine: per-thread cp.async into the
swizzled tiles vs bulk tensor copies (TMA, one thread; B's shared by clusters of 2 blocks
through multicast or not; groups of 8 or 16 block rows), plain and with the fused bias + GELU,
beside cuBLAS (torch.matmul) and cuBLAS + torch's bias + GELU (addmm, then gelu), at the square
sizes and transformer-FFN shapes.

    python benchmarks/gemm_fp16_fills.py [--quick]
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
from gpu import torch_time  # benchmarks/gpu.py: CUDA-event medians of a torch call

import tensorforge as tf
from tensorforge.ops.gemm_fp16 import TensorCoreTiles, schedule_gemm_fp16


def main() -> None:
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    quick = "--quick" in sys.argv
    shapes = [(4096, 4096, 4096)] if quick else [
        (4096, 4096, 4096), (8192, 8192, 8192), (8192, 3072, 768), (2048, 3072, 768),
        (8192, 768, 3072),
    ]  # fmt: skip
    rows = []
    warm = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    for _ in range(400):  # about a second of work first: clocks settled before any timing
        warm @ warm
    torch.cuda.synchronize()
    del warm
    for m, n, k in shapes:
        a = rng.uniform(-1, 1, (m, k)).astype("float16")
        b = rng.uniform(-1, 1, (k, n)).astype("float16")
        c = rng.uniform(-1, 1, (n,)).astype("float16")
        A, B, bias = tf.nd.array(a, dev), tf.nd.array(b, dev), tf.nd.array(c, dev)
        D = tf.nd.empty((m, n), "float16", dev)
        ta, tb, tc = (torch.from_numpy(x).cuda() for x in (a, b, c))
        ref = torch.matmul(ta.float(), tb.float())
        ref_gelu = F.gelu(ref + tc.float())
        flops = 2.0 * m * n * k
        cublas = torch_time(lambda x=ta, y=tb: torch.matmul(x, y), repeat=30)
        cublas_gelu = torch_time(lambda x=ta, y=tb, c=tc: F.gelu(torch.addmm(c, x, y)), repeat=30)
        base = TensorCoreTiles.for_shape(m, n, k, arch="sm_90")
        variants = [("default", base)]
        if base.mma == "wgmma":
            variants += [
                ("fill=cp_async", replace(base, fill="cp_async")),
                ("store=tma", replace(base, store="tma")),
            ]
        for epilogue in ("none", "bias_gelu"):
            theirs = cublas if epilogue == "none" else cublas_gelu
            rows.append((f"{m}x{n}x{k} {epilogue}", "cuBLAS" + ("+gelu" if epilogue != "none" else ""), theirs, flops / theirs / 1e12, 1.0, 0.0))  # fmt: skip
            for name, tiles in variants:
                try:
                    s, args = schedule_gemm_fp16(m, n, k, epilogue=epilogue, tiles=tiles)
                    mod = tf.build(s, args, target="cuda")
                except tf.TensorForgeError as error:
                    print(f"{m}x{n}x{k} {name}: {error}")
                    continue
                arrays = [A, B, D] if epilogue == "none" else [A, B, bias, D]
                D.copyfrom(np.full((m, n), np.nan, "float16"))
                mod(*arrays)
                want = ref if epilogue == "none" else ref_gelu
                got = torch.from_numpy(D.numpy().astype("float32")).cuda()
                err = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
                ours = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=7)(*arrays).median
                rows.append((f"{m}x{n}x{k} {epilogue}", name, ours, flops / ours / 1e12, theirs / ours, err))  # fmt: skip
        del A, B, D, ta, tb, ref, ref_gelu
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__}")
    print(f"{'case':<26} {'impl':<22} {'us':>8} {'TFLOP/s':>8} {'vs ref':>7} {'rel err':>9}")
    for case, impl, sec, rate, vs, err in rows:
        print(f"{case:<26} {impl:<22} {sec * 1e6:8.1f} {rate:8.1f} {vs:7.3f} {err:9.2e}")


if __name__ == "__main__":
    main()
