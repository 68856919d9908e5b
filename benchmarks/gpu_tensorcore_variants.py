"""Try several tensor-core GEMM configurations (ops/gemm_fp16.py) and SGEMM schedules in one run,
each checked against torch and timed beside cuBLAS.

Run on the GPU machine: python benchmarks/gpu_tensorcore_variants.py [--sgemm] [--ptxas]
(--ptxas: no GPU; print each tensor-core kernel's registers, spills and shared memory from nvcc).

Measured on the H100 (fp16, cuBLAS 700-745 TFLOP/s), earlier sessions: every 128 x 128
configuration lands at 290-327 TFLOP/s; then, in order:
- ldmatrix fragments double-buffered in registers + `__launch_bounds__(256, 1)` (pragma
  launch_min_blocks: ptxas had given 128x256x64 only 164 registers and put each ldmatrix right
  before its mma): 128x256x64 / 256x128x64 blocks of 8 warps 344-354 (128x128 unchanged ~305).
- double_buffer(sync="mbarrier") (full / empty mbarriers per slot instead of a block barrier a
  k step, warps drift apart): 128x256x64 s4 4096^3 352 -> 398, 8192^3 357 -> 400-418.
- groups of 16 block rows: 8192^3 406 -> 413 (4 rows: 372).
- more stages with k steps of 32 (s6, s8) or 256x128 blocks: no better (374-393).
- cluster=2 (B's tile shared by a pair of blocks: bulk row copies multicast to both): correct
  but slower, 229 (warp 0 issuing all 32 row copies) / 292-313 (spread over the warps).
- wgmma (ops/wgmma.py, sm_90a; same 128 x 256 blocks, two warpgroups of 64 x 256, cp.async
  into 128B-swizzled tiles): 4096^3 fp16 537-544 (0.75-0.79x), bf16 538-555, 8192^3 518-531
  (0.70-0.71x). Keeping a k step's wgmma in flight (sync="mbarrier_lag") +0-1%; 256 x 128
  blocks 505-523, 128 x 128 452-504, 3 stages 525-538. ncu (4096^3, clocks locked at 1.42 GHz):
  tensor pipe 59%, L2 50%, issue slots 24%, top stall "wait" (fixed-latency dependencies of the
  cp.async address math the same warps run); dropping the consumer's fence.proxy.async +1.4%.
  Next: producer warps (warp specialization) or TMA copies so the multiplying warps only wait.
What bounded the mma.sync kernel (ncu, 128x256x64 s4, 4096^3): L2 throughput 81.6% of peak (4.6 TB/s of
operand loads: a 128 x 256 block reads 48 KB per k step of 64), tensor pipe 62.6%; the same
ldmatrix + mma loop on fixed shared tiles runs at 598 (gpu_mma_probe.py wide). mma.sync cannot
take a bigger block (128 x 256 fp32 accumulators are half the register file), so going further
takes fewer L2 bytes a flop: TMA tensor copies multicast across a cluster (with swizzled, not
padded, rows so one copy moves a whole tile) or wgmma with 256-wide tiles.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile

import numpy as np
from gpu import torch_time  # benchmarks/gpu.py: the script's folder is on sys.path

import tensorforge as tf
from tensorforge.ops.gemm_fp16 import TensorCoreTiles, schedule_gemm_fp16

T = TensorCoreTiles
# (label, tiles): block m, n, k, warp m, n, stages, group_m
W, LAG = "wgmma", "mbarrier_lag"
CONFIGS = [
    ("mma_sync 128x256x64 s4 g16", T(128, 256, 64, 64, 64, 4, 16)),
    ("wgmma 128x256x64 s4 g16", T(128, 256, 64, 16, 256, 4, 16, mma=W)),
    ("wgmma lag 128x256x64 s4 g16", T(128, 256, 64, 16, 256, 4, 16, LAG, mma=W)),
    ("wgmma lag 128x256x64 s4 g8", T(128, 256, 64, 16, 256, 4, 8, LAG, mma=W)),
    ("wgmma lag 128x256x64 s3 g16", T(128, 256, 64, 16, 256, 3, 16, LAG, mma=W)),
    ("wgmma lag 256x128x64 s4 g16", T(256, 128, 64, 16, 128, 4, 16, LAG, mma=W)),
    ("wgmma lag 128x128x64 s3 g16", T(128, 128, 64, 16, 128, 3, 16, LAG, mma=W)),
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


def tensorcore(sizes=(4096, 8192), dtypes=("float16",)) -> None:
    import torch

    from tensorforge.te.dtype import from_bfloat16, to_bfloat16

    dev = tf.cuda(0)
    jobs = [(size, tiles, dt) for size in sizes for dt in dtypes for _, tiles in CONFIGS]
    modules = build_all(jobs)
    table = []
    for size in sizes:
        for dtype in dtypes:
            torch.manual_seed(0)
            fa = torch.rand(size, size, device="cuda").sub_(0.5)
            fb = torch.rand(size, size, device="cuda").sub_(0.5)
            if dtype == "bfloat16":
                ta, tb = fa.bfloat16(), fb.bfloat16()
                bits = [to_bfloat16(t.float().cpu().numpy()) for t in (ta, tb)]
                A, B = (tf.nd.array(b, dev) for b in bits)
                D = tf.nd.empty((size, size), "uint16", dev)
            else:
                ta, tb = fa.half(), fb.half()
                A, B = tf.nd.array(ta.cpu().numpy(), dev), tf.nd.array(tb.cpu().numpy(), dev)
                D = tf.nd.empty((size, size), "float16", dev)
            ref = torch.matmul(ta.float(), tb.float())
            cublas = torch_time(lambda x=ta, y=tb: torch.matmul(x, y))
            flops = 2.0 * size**3
            table.append(f"{dtype} {size}^3 cuBLAS {flops / cublas / 1e12:.1f} TFLOP/s")
            for label, tiles in CONFIGS:
                mod = modules[(size, tiles, dtype)]
                try:
                    if isinstance(mod, Exception):
                        raise mod
                    D.copyfrom(
                        np.full((size, size), 0x7FC0 if dtype == "bfloat16" else np.nan, D.dtype)
                    )
                    mod(A, B, D)
                    out = D.numpy()
                    out = from_bfloat16(out) if dtype == "bfloat16" else out.astype("float32")
                    got = torch.from_numpy(out).cuda()
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
            print(table[-1 - len(CONFIGS)], flush=True)
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
    cublas = torch_time(lambda: ta @ tb)
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
        sizes = tuple(int(a.split("=")[1]) for a in sys.argv if a.startswith("--size="))
        dtypes = ("float16", "bfloat16") if "--bf16" in sys.argv else ("float16",)
        tensorcore(sizes or (4096, 8192), dtypes)
