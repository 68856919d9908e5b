"""Accuracy of the float32 math polynomials (codegen/llvm_math.py) against float64 references,
as compiled for a target: every Kth float32 bit pattern (both signs, denormals, the tails), a
dense uniform sweep of the interesting range, and the special values (+-0, +-inf, NaN).

Prints per function: max relative error where the float64 result is a normal float32, max error
in float32 ulps (the spacing at the float64 result rounded to float32, the smallest denormal's
below), and whether the special values came out right.

Run: python benchmarks/math_accuracy.py [--target 'llvm -mcpu=znver3'] [--stride 997]
     [--funcs erf,exp] [--lanes 16]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

import tensorforge as tf
from tensorforge import te


def _erf64(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid64(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


REFERENCES = {  # name: (te function, float64 reference, dense sweep range)
    "erf": (te.erf, _erf64, (-6.0, 6.0)),
    "exp": (te.exp, np.exp, (-110.0, 92.0)),
    "tanh": (te.tanh, np.tanh, (-12.0, 12.0)),
    "sigmoid": (te.sigmoid, _sigmoid64, (-110.0, 110.0)),
    "log": (te.log, np.log, (0.0, 100.0)),
}

SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40, 1.17549435e-38],
    np.float32,
)


def sweep_inputs(stride: int, lo: float, hi: float) -> np.ndarray:
    """Every `stride`th bit pattern, 2**20 points uniform in [lo, hi], and the special values."""
    bits = np.arange(0, 2**32, stride, dtype=np.uint64).astype(np.uint32)
    patterns = bits.view(np.float32)
    dense = np.linspace(lo, hi, 2**20).astype(np.float32)
    return np.concatenate([patterns, dense, SPECIALS])


def build(name: str, size: int, target: str, lanes: int):
    x = te.placeholder((size,), name="x")
    y = te.compute((size,), lambda i: REFERENCES[name][0](x[i]), name="y")
    s = te.create_schedule(y.op)
    _, inner = s[y].split(y.op.axis[0], factor=lanes)
    s[y].vectorize(inner)
    return tf.build(s, [x, y], target=target, name=f"acc_{name}")


def errors(got: np.ndarray, x: np.ndarray, reference) -> dict:
    with np.errstate(all="ignore"):
        want64 = reference(x.astype(np.float64))
        want = want64.astype(np.float32)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        spacing = np.maximum(
            np.spacing(np.abs(want)).astype(np.float64), float(np.spacing(np.float32(0)))
        )
        diff = np.abs(got.astype(np.float64) - want64)
        ulp = np.where(same, 0.0, diff / spacing)
        normal = np.isfinite(want64) & (np.abs(want64) >= np.finfo(np.float32).tiny)
        rel = np.where(same | ~normal, 0.0, diff / np.abs(np.where(normal, want64, 1.0)))
    bad_special = ~same & ~np.isfinite(want)  # inf/NaN results must match exactly
    worst = int(np.argmax(ulp))
    return {
        "max_rel": float(np.max(rel)),
        "max_ulp": float(np.max(ulp)),
        "worst_x": float(x[worst]),
        "special_mismatches": int(np.count_nonzero(bad_special)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--stride", type=int, default=997)
    parser.add_argument("--funcs", default="erf,exp,tanh,sigmoid")
    parser.add_argument("--lanes", type=int, default=16)
    args = parser.parse_args()
    print(f"target {args.target}, {args.lanes} lanes, every {args.stride}th bit pattern")
    for name in args.funcs.split(","):
        x = sweep_inputs(args.stride, *REFERENCES[name][2])
        x = np.concatenate([x, np.zeros((-x.size) % args.lanes, np.float32)])
        mod = build(name, x.size, args.target, args.lanes)
        out = tf.nd.empty((x.size,))
        mod(tf.nd.array(x), out)
        e = errors(out.numpy(), x, REFERENCES[name][1])
        print(
            f"{name:8s} max rel {e['max_rel']:.3g}  max {e['max_ulp']:.2f} ulp "
            f"(at {e['worst_x']:.9g})  inf/NaN mismatches {e['special_mismatches']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
