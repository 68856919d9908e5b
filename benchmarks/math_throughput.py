"""Element-wise math throughput on one core: y = f(x) over a 4096 x 1024 float32 array for
f in gelu (erf form, as torch's default), erf, exp, tanh, sigmoid, with ops' element-wise
schedule, in elements per ns (thread CPU time, best of interleaved rounds).

`--baseline FILE` builds each function a second time with the float32 polynomials of another
copy of codegen/llvm_math.py (e.g. main's, `git show main:src/tensorforge/codegen/llvm_math.py
> /tmp/old_math.py`) and times both in turns in this one process: a before/after on the same
disturbances. `--target 'llvm -mcpu=znver3'` compiles for another CPU (it must run here).

Run: TENSORFORGE_CACHE=0 nice python benchmarks/math_throughput.py [--baseline FILE]
     [--target T] [--funcs gelu,erf] [--rounds 7] [--rows 64]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import time

os.environ.setdefault("TF_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import tensorforge as tf  # noqa: E402
from tensorforge import te  # noqa: E402
from tensorforge.codegen import llvm_math  # noqa: E402
from tensorforge.ops.elementwise import schedule_elementwise  # noqa: E402

SHAPE = (4096, 1024)


def _gelu(x):
    return 0.5 * x * (1.0 + te.erf(x * 0.7071067811865476))


FUNCS = {  # name: (expression, input sampler)
    "gelu": (_gelu, lambda r, n: r.standard_normal(n) * 3.0),
    "erf": (te.erf, lambda r, n: r.standard_normal(n) * 2.0),
    "exp": (te.exp, lambda r, n: r.uniform(-20, 20, n)),
    "tanh": (te.tanh, lambda r, n: r.standard_normal(n) * 2.0),
    "sigmoid": (te.sigmoid, lambda r, n: r.standard_normal(n) * 4.0),
}


@contextlib.contextmanager
def bodies_from(path: str | None):
    """Build with the polynomials of the llvm_math.py at `path` (None: this checkout's)."""
    if path is None:
        yield
        return
    spec = importlib.util.spec_from_file_location("_baseline_llvm_math", path)
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    saved = dict(llvm_math._BODIES)
    llvm_math._BODIES.update(other._BODIES)
    try:
        yield
    finally:
        llvm_math._BODIES.clear()
        llvm_math._BODIES.update(saved)


def build(name: str, shape: tuple, target: str, baseline: str | None):
    fexpr, _ = FUNCS[name]
    x = te.placeholder(shape, name="x")
    y = te.compute(shape, lambda i, j: fexpr(x[i, j]), name="y")
    with bodies_from(baseline):
        s = schedule_elementwise(y, tf.target.Target(target), parallel=False)
        return tf.build(s, [x, y], target=target, name=f"{name}_math")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=None, help="another llvm_math.py to compare with")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--funcs", default=",".join(FUNCS))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=5)
    parser.add_argument(
        "--rows", type=int, default=SHAPE[0], help="64: the arrays fit in L2 (compute-bound)"
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.rows, SHAPE[1])
    n = shape[0] * shape[1]
    number = max(args.number, args.number * SHAPE[0] // args.rows)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"target {args.target}, {shape[0]}x{shape[1]} float32, 1 thread, load {load}")
    for name in args.funcs.split(","):
        x = tf.nd.array(FUNCS[name][1](rng, n).astype(np.float32).reshape(shape))
        variants = {"new": build(name, shape, args.target, None)}
        if args.baseline:
            variants["base"] = build(name, shape, args.target, args.baseline)
        outs = {k: tf.nd.empty(shape) for k in variants}
        best = dict.fromkeys(variants, math.inf)
        for _ in range(args.rounds):
            for k, mod in variants.items():
                mod(x, outs[k])
                start = time.thread_time()
                for _ in range(number):
                    mod(x, outs[k])
                best[k] = min(best[k], (time.thread_time() - start) / number)
        line = f"{name:8s} new {n / best['new'] / 1e9:6.3f} el/ns ({best['new'] * 1e3:6.2f} ms)"
        if args.baseline:
            line += (
                f"  base {n / best['base'] / 1e9:6.3f} el/ns ({best['base'] * 1e3:6.2f} ms)"
                f"  speedup {best['base'] / best['new']:.2f}x"
            )
        print(line, flush=True)


if __name__ == "__main__":
    main()
