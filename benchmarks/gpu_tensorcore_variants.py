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
    ("128x256x64 s4", T(128, 256, 64, 64, 64, 4, 8)),
    ("128x256x64 s4 g4", T(128, 256, 64, 64, 64, 4, 4)),
    ("128x256x64 s4 g16", T(128, 256, 64, 64, 64, 4, 16)),
    ("256x128x64 s4", T(256, 128, 64, 64, 64, 4, 8)),
    ("256x128x64 s4 g16", T(256, 128, 64, 64, 64, 4, 16)),
    ("128x256x32 s6", T(128, 256, 32, 64, 64, 6, 8)),
    ("128x256x32 s8", T(128, 256, 32, 64, 64, 8, 8)),
    ("256x128x32 s6", T(256, 128, 32, 64, 64, 6, 8)),
]


def build(size, tiles, dtype="float16", epilogue="none"):
    s, args = schedule_gemm_fp16(size, size, size, dtype, epilogue=epilogue, tiles=tiles)
    return tf.build(s, args, target="cuda")


def build_all(jobs):
    """Build (size, tiles, ...) jobs: generate the CUDA C here, run nvcc for all of them on
    threads (no CUDA context there), then load each in this thread. {job: module or error}"""
    from concurrent.futures import ThreadPoolExecutor

    from tensorforge.codegen.base import codegen_for
    from tensorforge.runtime import cuda_exec
    from tensorforge.target import as_target

    target = as_target("cuda")
    texts = {}
    for job in jobs:
        size, tiles, *rest = job
        s, args = schedule_gemm_fp16(size, size, size, *rest[:1], tiles=tiles)
        source = codegen_for("cuda").generate(tf.lower(s, args, target=target), target)
        texts[job] = (source.text, cuda_exec._arch_of(target, source))

    def compile_one(text_arch):
        try:
            cuda_exec.compile_cuda(*text_arch)
        except Exception:  # reported again when the job is built below
            pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(compile_one, texts.values()))
    out = {}
    for job in jobs:
        try:
            out[job] = build(*job)
        except Exception as e:  # report it with the variant: one run tries them all
            out[job] = e
    return out


def ptxas() -> None:
    for label, tiles in CONFIGS:
        text = build(4096, tiles).get_source("cuda")
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
    modules = build_all([(size, tiles) for size in sizes for _, tiles in CONFIGS])
    table = []
    for size in sizes:
        torch.manual_seed(0)
        ta = torch.rand(size, size, device="cuda").sub_(0.5).half()
        tb = torch.rand(size, size, device="cuda").sub_(0.5).half()
        ref = torch.matmul(ta.float(), tb.float())
        A, B = tf.nd.array(ta.cpu().numpy(), dev), tf.nd.array(tb.cpu().numpy(), dev)
        D = tf.nd.empty((size, size), "float16", dev)
        cublas = timed(lambda x=ta, y=tb: torch.matmul(x, y))
        flops = 2.0 * size**3
        table.append(f"fp16 {size}^3 cuBLAS {flops / cublas / 1e12:.1f} TFLOP/s")
        for label, tiles in CONFIGS:
            mod = modules[(size, tiles)]
            try:
                if isinstance(mod, Exception):
                    raise mod
                D.copyfrom(np.full((size, size), np.nan, "float16"))
                mod(A, B, D)
                got = torch.from_numpy(D.numpy()).cuda().float()
                err = float((got - ref).norm() / ref.norm())
                t = mod.time_evaluator(mod.entry_name, dev, number=10, repeat=5)(A, B, D).median
            except Exception as e:
                table.append(f"  {label}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            table.append(
                f"  {label}: {flops / t / 1e12:6.1f} TFLOP/s {cublas / t:5.2f}x cuBLAS "
                f"err {err:.1e}"
            )
        del A, B, D, ta, tb, ref
        torch.cuda.empty_cache()
    print("\n".join(table), flush=True)


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
