"""Tutorial 7: where each kernel sits against this machine's roofline (peak FLOP/s, copy bandwidth).

Measures the limits with tensorforge kernels (an FMA chain, a copy), runs the library's best
schedules, and plots achieved GFLOP/s against arithmetic intensity (FLOPs per byte moved) to
roofline.png.

Run: python tutorials/07_roofline.py [--small] [--out roofline.png]
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tensorforge import bench  # noqa: E402

SMALL = "--small" in sys.argv
OUT = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "roofline.png"
THREADS = 1

# (case, FLOPs, bytes moved at least) for the full-size benchmark kernels
KERNELS = {
    "gemm1024": (2 * 1024**3, 3 * 1024 * 1024 * 4),
    "chain": (4 * 4096 * 4096, 2 * 4096 * 4096 * 4),  # relu, scale, shift: ~4 flops/element + exp
    "softmax": (5 * 4096 * 4096, 2 * 4096 * 4096 * 4),
    "layernorm": (8 * 4096 * 4096, 2 * 4096 * 4096 * 4),
    "conv2d": (2 * 64 * 64 * 9 * 56 * 56, (64 * 56 * 56 * 2 + 64 * 64 * 9) * 4),
}


def main() -> None:
    if SMALL:  # the tests: just the limits and one small kernel
        cases = ["peak", "copy", "chain"]
    else:
        cases = ["peak", "copy", *KERNELS]
    rows = {r.case: r for r in bench.run_cases(cases, THREADS)}
    peak, bandwidth = rows["peak"].rate, rows["copy"].rate
    bench.print_table(list(rows.values()))

    fig, ax = plt.subplots(figsize=(7, 5))
    intensity = np.logspace(-2, 3, 200)
    ax.loglog(intensity, np.minimum(peak, bandwidth * intensity), "k-", label="roofline")
    for name, row in rows.items():
        if name not in KERNELS:
            continue
        flops, moved = KERNELS[name]
        achieved = flops / row.seconds / 1e9
        ax.loglog(flops / moved, achieved, "o")
        ax.annotate(name, (flops / moved, achieved), textcoords="offset points", xytext=(5, 5))
        print(
            f"{name:<10} intensity {flops / moved:8.2f} FLOP/B   {achieved:8.1f} GFLOP/s   "
            f"{achieved / min(peak, bandwidth * flops / moved):5.2f} of the roof"
        )
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"roofline: peak {peak:.0f} GFLOP/s, copy {bandwidth:.1f} GB/s, {THREADS} thread")
    ax.legend()
    fig.savefig(OUT, dpi=120, bbox_inches="tight")
    print(f"saved {OUT}")


if __name__ == "__main__":
    main()
