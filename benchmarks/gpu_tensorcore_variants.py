"""Try several tensor-core GEMM configurations (ops/gemm_fp16.py) and SGEMM schedules in one run,
each checked against torch and timed beside cuBLAS.

Run on the GPU machine: python benchmarks/gpu_tensorcore_variants.py [--sgemm] [--ptxas]
(--ptxas: no GPU; print each tensor-core kernel's registers, spills and shared memory from nvcc).

Measured on the H100 (fp16, 4096^3 / 8192^3, cuBLAS 655-750 TFLOP/s): every configuration tried
lands at 290-327 TFLOP/s (0.40-0.48x): block 128x128 / 128x256 / 256x128, k step 32 or 64,
warp tiles 64x64 / 64x32 / 32x64 (8 to 16 warps a block), 2 to 4 stages, refill before or
after the mma, raster groups of 1 / 8 / 16 block rows. The ceilings (gpu_mma_probe.py):
mma.sync alone 640 TFLOP/s; the ldmatrix + mma loop on fixed shared tiles 590-605 (530-570 with
a barrier per k step). ncu of the 128x128x32 kernel: tensor pipe 52% active, L2 5.9 TB/s, stalls
per issued instruction: short scoreboard (ldmatrix) 3.9, wait 3.2, long scoreboard (cp.async
wait) 1.9, math throttle 1.5, barrier 0.8. What is left is the latency of the global -> shared
-> register path around each barrier: CUTLASS-style fragment prefetch across the barrier, or
wgmma / TMA (sm_90a), not tile shapes.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile

import numpy as np

import tensorforge as tf
from tensorforge.ops.gemm_fp16 import TensorCoreTiles, schedule_gemm_fp16

T = TensorCoreTiles
# (label, tiles): block m, n, k, warp m, n, stages, group_m
CONFIGS = [
    ("128x128x32 s3 g8", T(128, 128, 32, 64, 64, 3, 8), True),
    ("128x128x32 s4 g8", T(128, 128, 32, 64, 64, 4, 8), True),
    ("128x256x64 s4 g8", T(128, 256, 64, 64, 64, 4, 8), True),
    ("256x128x64 s3 g8", T(256, 128, 64, 64, 64, 3, 8), True),
    ("128x256x32 w64x32 s4 g8", T(128, 256, 32, 64, 32, 4, 8), True),
    ("128x256x64 w64x32 s3 g8", T(128, 256, 64, 64, 32, 3, 8), True),
    ("256x128x32 w32x64 s4 g8", T(256, 128, 32, 32, 64, 4, 8), True),
    ("128x128x32 w64x32 s4 g8", T(128, 128, 32, 64, 32, 4, 8), True),
    ("128x128x32 w32x64 s4 g8", T(128, 128, 32, 32, 64, 4, 8), True),
    ("128x128x32 w64x32 s3 g8", T(128, 128, 32, 64, 32, 3, 8), True),
]


def build(size, tiles, fill_last):
    from tensorforge.ir.passes import inject_double_buffer as pass_module

    pass_module.FILL_LAST = fill_last
    try:
        s, args = schedule_gemm_fp16(size, size, size, tiles=tiles)
        return tf.build(s, args, target="cuda")
    finally:
        pass_module.FILL_LAST = False


def ptxas() -> None:
    for label, tiles, fill_last in CONFIGS:
        text = build(4096, tiles, fill_last).get_source("cuda")
        with tempfile.TemporaryDirectory() as d:
            src = f"{d}/k.cu"
            open(src, "w").write(text)
            r = subprocess.run(
                ["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", f"{d}/k.cubin", src],
                capture_output=True,
                text=True,
                check=False,
            )
        regs = re.search(r"Used (\d+) registers", r.stderr)
        spill = re.search(r"(\d+) bytes spill stores", r.stderr)
        print(
            f"{label}: {regs.group(1) if regs else '?'} registers, "
            f"{spill.group(1) if spill else '?'} bytes spilled, {tiles.shared_bytes()} B shared, "
            f"{tiles.warps} warps"
        )


def timed(fn, repeat=20) -> float:
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


def tensorcore(sizes=(4096, 8192)) -> None:
    import torch

    dev = tf.cuda(0)
    for size in sizes:
        torch.manual_seed(0)
        ta = torch.rand(size, size, device="cuda").sub_(0.5).half()
        tb = torch.rand(size, size, device="cuda").sub_(0.5).half()
        ref = torch.matmul(ta.float(), tb.float())
        A, B = tf.nd.array(ta.cpu().numpy(), dev), tf.nd.array(tb.cpu().numpy(), dev)
        D = tf.nd.empty((size, size), "float16", dev)
        cublas = timed(lambda x=ta, y=tb: torch.matmul(x, y))
        flops = 2.0 * size**3
        print(f"fp16 {size}^3 cuBLAS {flops / cublas / 1e12:.1f} TFLOP/s", flush=True)
        for label, tiles, fill_last in CONFIGS:
            try:
                mod = build(size, tiles, fill_last)
                mod(A, B, D)
                got = torch.from_numpy(D.numpy()).cuda().float()
                err = float((got - ref).norm() / ref.norm())
                t = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=5)(A, B, D).median
            except Exception as e:  # report and go on: one run tries them all
                print(f"  {label}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            print(
                f"  {label}: {flops / t / 1e12:6.1f} TFLOP/s {cublas / t:5.2f}x cuBLAS "
                f"err {err:.1e}",
                flush=True,
            )
        del A, B, D, ta, tb, ref
        torch.cuda.empty_cache()


def sgemm(size=4096) -> None:
    import torch

    sys.path.insert(0, "benchmarks")
    from gpu import tvm_style_sgemm

    from tensorforge.ops.cuda import schedule_matmul_cuda

    torch.backends.cuda.matmul.allow_tf32 = False
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    A, B = tf.nd.array(a, dev), tf.nd.array(b, dev)
    C = tf.nd.empty((size, size), "float32", dev)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ref = (ta.double() @ tb.double()).cpu().numpy()
    cublas = timed(lambda: ta @ tb)
    flops = 2.0 * size**3
    print(f"fp32 {size}^3 cuBLAS {flops / cublas / 1e12:.1f} TFLOP/s", flush=True)

    def tvm(double_buffer):
        s, args = tvm_style_sgemm(size, size, size, double_buffer=double_buffer)
        return s, args

    variants = [
        ("TVM-style", lambda: tvm(False)),
        ("TVM-style double_buffer", lambda: tvm(True)),
        ("ops", lambda: schedule_matmul_cuda(size, size, size)),
        ("ops double_buffer", lambda: schedule_matmul_cuda(size, size, size, double_buffer=True)),
    ]
    for label, make in variants:
        try:
            s, args = make()
            mod = tf.build(s, args, target="cuda")
            mod(A, B, C)
            err = np.linalg.norm(C.numpy() - ref) / np.linalg.norm(ref)
            t = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=5)(A, B, C).median
        except Exception as e:
            print(f"  {label}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        print(
            f"  {label}: {flops / t / 1e12:6.1f} TFLOP/s {cublas / t:5.2f}x cuBLAS err {err:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    if "--ptxas" in sys.argv:
        ptxas()
    else:
        if "--sgemm" in sys.argv:
            sgemm()
        tensorcore()
