"""int8 and bfloat16 GEMM at 1024^3 through tensorize (ops/cpu_dot.py), B packed into VNNI
panels, beside the project's own float32 GEMM (ops.schedule_matmul), in one process, on one
thread (TF_NUM_THREADS, default 1).

    python benchmarks/cpu_dot.py [size] [--repeat R] [--target "llvm -mcpu=znver3"]

--target: what every kernel (and the micro-kernels' C) is built for, default "llvm" (this CPU).

Each row: min and median of R repeats (of 5 calls each), packing included; the fp32 GEMM is
timed first and again last (the machine may be shared: ratios use the faster of the two,
min to min and median to median). Rows for the AVX-512 micro-kernels (vpdpbusd / vdpbf16ps)
and, where the CPU has them, the AMX ones (tdpbusd / tdpbf16ps); without the features the
micro-kernels widen to int16 multiply-adds / float FMAs on AVX2, else are plain C (the row
says which).

Measured 2026-11-25 on a 2-core KVM Xeon with AVX512-VNNI/BF16 and AMX (LLVM: "rocketlake"),
1 thread, the machine shared with other jobs (load average as printed). Peaks of this core,
from loops of independent instructions: fp32 FMA 236 GFLOP/s, vpdpbusd 950 GOP/s, vdpbf16ps
only 119 GFLOP/s (half of fp32 FMA's rate here, so no vdpbf16ps kernel can reach 1.5x the fp32
GEMM on this core: the bf16 target needs AMX), a loop of AMX tile products 3.7 TFLOP/s bf16, 7.5 TOP/s int8.

    GEMM 1024^3, 1 thread(s), rocketlake; load 1.78
    impl                                     min ms   med ms  GOP/s max  GOP/s med  vs fp32 min/med
    float32 (ops.matmul), first               12.78    12.89      168.0      166.6
    int8 avx512vnni 48x64x512                  3.44     3.48      624.1      617.3    3.50x / 3.52x
    bfloat16 avx512bf16 48x64x256             20.48    20.61      104.9      104.2    0.59x / 0.59x
    int8 amx-int8 128x64x2048                  0.93     0.95     2315.6     2271.0  12.98x / 12.96x
    bfloat16 amx-bf16 128x64x1024              2.16     2.19      993.0      982.2    5.56x / 5.60x
    float32 (ops.matmul), last                12.03    12.25      178.5      175.3

    1000^3 (load 1.89), vs fp32 min/med: int8 VNNI 3.37x / 3.41x, bf16 vdpbf16ps 0.60x / 0.62x,
    int8 AMX 8.48x / 8.69x, bf16 AMX 3.78x / 3.84x (fp32 159-170 GFLOP/s)
    1031^3 (load 1.90): int8 VNNI 3.52x / 3.51x, bf16 vdpbf16ps 0.58x / 0.59x,
    int8 AMX 8.32x / 8.48x, bf16 AMX 3.53x / 3.57x (fp32 156-163 GFLOP/s)

The same host before B was packed (B read from its rows, interleaved by vpermt2b / vpermt2w on
the fly, 4 x 4 zmm accumulators; load 0.7): int8 2.06x, bf16 0.48x. On Emerald Rapids (16
cores, no AMX exposed) that kernel gave int8 1.77-2.06x, bf16 0.42-0.53x.
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

import tensorforge as tf
from tensorforge.ops import cpu_dot, cpu_dot_kernels
from tensorforge.ops.matmul import schedule_matmul
from tensorforge.te.dtype import from_bfloat16, to_bfloat16


def timed(f, arrays, repeat: int) -> tuple[float, float]:
    """(min, median) seconds of one call over `repeat` repeats of 5 calls."""
    result = f.time_evaluator(f.entry_name, tf.cpu(0), number=5, repeat=repeat)(*arrays)
    return min(result.results), statistics.median(result.results)


def inputs(kind: str, size: int, rng):
    """(A, B, C) arrays for `kind` and the exact product in float64."""
    if kind == "int8":
        a = rng.integers(0, 256, (size, size)).astype("uint8")
        b = rng.integers(-128, 128, (size, size)).astype("int8")
        return a, b, "int32", a.astype("int64") @ b.astype("int64")
    a = to_bfloat16(rng.uniform(-1, 1, (size, size)))
    b = to_bfloat16(rng.uniform(-1, 1, (size, size)))
    return a, b, "float32", from_bfloat16(a).astype("float64") @ from_bfloat16(b).astype("float64")


def main() -> None:
    os.environ.setdefault("TF_NUM_THREADS", "1")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("size", type=int, nargs="?", default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--target", default="llvm", help='e.g. "llvm -mcpu=znver3" (AVX2)')
    args = parser.parse_args()
    with tf.Target(args.target):
        run(args.size, args.repeat)


def run(size: int, repeat: int) -> None:
    """The table for one size, built for the current target."""
    rng = np.random.default_rng(0)
    cpu_dot.load_microkernels()
    flops = 2.0 * size**3

    s, fargs = schedule_matmul(size, size, size)
    fp32 = tf.build(s, fargs)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    fp32_arrays = [tf.nd.array(a), tf.nd.array(b), tf.nd.empty((size, size), "float32")]
    rows = [("float32 (ops.matmul), first", *timed(fp32, fp32_arrays, repeat))]
    variants = [(kind, False) for kind in cpu_dot.KINDS]
    variants += [(kind, True) for kind in cpu_dot.KINDS if cpu_dot.has_amx(kind)]
    for kind, amx in variants:
        tiles = cpu_dot.DotTiles.for_target(kind, amx=amx)
        s, dargs = cpu_dot.schedule_dot_gemm(size, size, size, kind, tiles=tiles)
        f = tf.build(s, dargs)
        x, y, out_dtype, ref = inputs(kind, size, rng)
        arrays = [tf.nd.array(x), tf.nd.array(y), tf.nd.empty((size, size), out_dtype)]
        f(*arrays)
        err = np.abs(arrays[2].numpy() - ref).max() / max(1.0, np.abs(ref).max())
        assert err < 1e-4, f"{kind}: error {err}"
        spec = cpu_dot.KINDS[kind]
        if amx:
            how = spec.amx_feature if cpu_dot_kernels.amx_runs(kind) else "AMX denied: AVX-512"
        else:
            how = cpu_dot_kernels.vector_path(kind)
        tile = f"{tiles.mr}x{tiles.nr}x{tiles.kc}"
        rows.append((f"{kind} {how} {tile}", *timed(f, arrays, repeat)))
    rows.append(("float32 (ops.matmul), last", *timed(fp32, fp32_arrays, repeat)))
    # the faster of the two fp32 runs (min of mins, min of medians): the ratios err low
    ref_min, ref_median = min(rows[0][1], rows[-1][1]), min(rows[0][2], rows[-1][2])

    print(f"GEMM {size}^3, {os.environ['TF_NUM_THREADS']} thread(s), {tf.target.Target.current().mcpu}; load {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'impl':<38} {'min ms':>8} {'med ms':>8} {'GOP/s max':>10} {'GOP/s med':>10} {'vs fp32 min/med':>16}")  # fmt: skip
    for name, best, median in rows:
        vs = "" if name.startswith("float32") else f"{ref_min / best:.2f}x / {ref_median / median:.2f}x"  # fmt: skip
        print(f"{name:<38} {best * 1e3:8.2f} {median * 1e3:8.2f} {flops / best / 1e9:10.1f} {flops / median / 1e9:10.1f} {vs:>16}")  # fmt: skip


if __name__ == "__main__":
    main()
