"""int8 (AVX512-VNNI) and bfloat16 (AVX512-BF16) GEMM at 1024^3 through tensorize, beside the
project's own float32 GEMM (ops.schedule_matmul), in one process.

Run on a host with the features (Sapphire Rapids, Zen 4): python benchmarks/cpu_dot.py
[size] [--orders] (--orders: also the "panels" loop order). Without them the micro-kernels are
plain C (the table says so): the numbers then mean little.

Measured on the H100 machine's host (Emerald Rapids, 16 cores; fp32 ops.matmul 916-1015
GFLOP/s): 16-column micro-kernels int8 1.41x, bf16 0.40x; 64-column ones (vpermt2b / vpermt2w
interleave, 4 x 4 accumulators) int8 1.77-2.06x, bf16 0.42-0.53x; "panels" order int8 0.52x,
bf16 0.44x. bf16's vdpbf16ps does half of vpdpbusd's multiply-adds an instruction, so it peaks
where fp32 FMA does; B's rows 1-2 KB apart (no packed panels) keep both off their peaks.
"""

from __future__ import annotations

import sys

import numpy as np

import tensorforge as tf
from tensorforge.ops import cpu_dot
from tensorforge.ops.matmul import schedule_matmul
from tensorforge.te.dtype import from_bfloat16, to_bfloat16

ORDERS = ("rows", "panels") if "--orders" in sys.argv else ("rows",)


def timed(f, arrays) -> float:
    return f.time_evaluator(f.entry_name, tf.cpu(0), number=5, repeat=5)(*arrays).median


def main() -> None:
    sizes = [a for a in sys.argv[1:] if a.isdigit()]
    size = int(sizes[0]) if sizes else 1024
    rng = np.random.default_rng(0)
    cpu_dot.load_microkernels()
    flops = 2.0 * size**3
    rows = []
    s, args = schedule_matmul(size, size, size)
    f = tf.build(s, args)
    a = rng.uniform(-1, 1, (size, size)).astype("float32")
    b = rng.uniform(-1, 1, (size, size)).astype("float32")
    c = tf.nd.empty((size, size), "float32")
    fp32 = timed(f, [tf.nd.array(a), tf.nd.array(b), c])
    rows.append(("float32 (ops.matmul)", fp32, ""))
    for kind, order in [(k, o) for k in ("int8", "bfloat16") for o in ORDERS]:
        s, args = cpu_dot.schedule_dot_gemm(size, size, size, kind, order=order)
        f = tf.build(s, args)
        if kind == "int8":
            x = rng.integers(0, 256, (size, size)).astype("uint8")
            y = rng.integers(-128, 128, (size, size)).astype("int8")
            out = tf.nd.empty((size, size), "int32")
            ref = x.astype("int64") @ y.astype("int64")
        else:
            x, y = to_bfloat16(a), to_bfloat16(b)
            out = tf.nd.empty((size, size), "float32")
            ref = from_bfloat16(x).astype("float64") @ from_bfloat16(y).astype("float64")
        arrays = [tf.nd.array(x), tf.nd.array(y), out]
        f(*arrays)
        err = np.abs(out.numpy() - ref).max() / max(1.0, np.abs(ref).max())
        assert err < 1e-4, f"{kind}: error {err}"
        feature = "uses " + cpu_dot.KINDS[kind][5] if cpu_dot.has_feature(kind) else "plain C"
        t = timed(f, arrays)
        rows.append((f"{kind} {order} ({feature})", t, f"{fp32 / t:.2f}x"))
    print(f"GEMM {size}^3 on this CPU ({tf.target.Target('llvm').mcpu})")
    print(f"{'impl':<32} {'time (ms)':>10} {'GOP/s':>8} {'vs fp32':>8}")
    for name, seconds, vs in rows:
        print(f"{name:<32} {seconds * 1e3:10.2f} {flops / seconds / 1e9:8.1f} {vs:>8}")


if __name__ == "__main__":
    main()
