"""`tensorforge bench`: the CPU benchmark suite, each kernel beside NumPy in the same run.

Every case is built with the project's best schedule (tensorforge.ops), checked against NumPy,
then timed. Thread counts run in child processes so OpenBLAS and the kernel pool both see the
same TF_NUM_THREADS / OPENBLAS_NUM_THREADS from their start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from tensorforge.target import Target, as_target

CASES = (
    "peak",
    "copy",
    "gemm1024",
    "gemm2048",
    "gemm1000",
    "chain",
    "softmax",
    "layernorm",
    "conv2d",
)


@dataclass
class Row:
    case: str
    threads: int
    seconds: float
    rate: float  # GFLOP/s or GB/s
    unit: str
    numpy_seconds: float
    build_seconds: float
    # of peak FLOP/s or copy bandwidth at this thread count; None where that limit was not run
    limit_fraction: float | None = None

    @property
    def ratio(self) -> float | None:
        """How many times faster than NumPy (> 1 is faster); None without a NumPy reference."""
        return self.numpy_seconds / self.seconds if self.numpy_seconds else None


def _median(fn: Callable[[], object], repeat: int = 7, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _time_module(mod, arrays, repeat: int = 7) -> float:
    import tensorforge as tf

    return mod.time_evaluator(mod.entry_name, tf.cpu(0), number=1, repeat=repeat, min_repeat_ms=50)(
        *arrays
    ).median


def _build(s, args):
    import tensorforge as tf

    t0 = time.perf_counter()
    mod = tf.build(s, args)
    return mod, time.perf_counter() - t0


def _arrays(*shapes_and_data):
    import tensorforge as tf

    return [tf.nd.array(a) for a in shapes_and_data]


# -- the machine's limits --------------------------------------------------------------------------


def bench_peak(threads: int) -> Row:
    """Peak FLOP/s: independent FMA chains on vector registers (acc = acc * c + x), no memory."""
    from tensorforge import te

    target = as_target(None)  # the benchmark's --target, else this CPU
    lanes = target.vector_lanes("float32")
    chains = (
        10 * lanes
    )  # 10 vector accumulators: enough to hide FMA latency, few enough to stay in registers
    rows, steps = 64 * threads, 20000
    fma = te.comm_reducer(
        lambda acc, v: acc * 0.999 + v, lambda d: te.const(0, d), name="fma_chain"
    )
    x = te.placeholder((rows, chains), name="x")
    k = te.reduce_axis((0, steps), name="k")
    y = te.compute((rows, chains), lambda i, j: fma(x[i, j], axis=k), name="y")
    s = te.create_schedule(y.op)
    yl = s.cache_write(y, "local")
    i, j = s[y].op.axis
    s[y].parallel(i)
    s[yl].compute_at(s[y], i)
    _, lj = s[yl].op.axis
    (lk,) = s[yl].op.reduce_axis
    jo, ji = s[yl].split(lj, factor=lanes)
    s[yl].reorder(lk, jo, ji)
    s[yl].unroll(jo)
    s[yl].vectorize(ji)
    mod, build = _build(s, [x, y])
    xa, ya = _arrays(np.full((rows, chains), 1e-3, "float32"), np.zeros((rows, chains), "float32"))
    seconds = _time_module(mod, [xa, ya], repeat=5)
    flops = 2.0 * rows * chains * steps
    return Row("peak", threads, seconds, flops / seconds / 1e9, "GFLOP/s", 0.0, build, 1.0)


def bench_copy(threads: int) -> Row:
    """Bandwidth: a 64 MiB copy (bytes read + bytes written), vectorized and parallel."""
    from tensorforge import te

    n = 16 * 1024 * 1024
    lanes = as_target(None).vector_lanes("float32")
    a = te.placeholder((n,), name="a")
    b = te.compute((n,), lambda i: a[i], name="b")
    s = te.create_schedule(b.op)
    # NOTE: chunks of 16 KiB with the vector copies unrolled. With 2 KiB chunks LLVM turned each
    # chunk into a memcpy call and the "limit" came out 1.6x below what the machine moves.
    o, v = s[b].split(b.op.axis[0], factor=4096)
    s[b].parallel(o)
    vo, vi = s[b].split(v, factor=4 * lanes)
    vu, vv = s[b].split(vi, factor=lanes)
    s[b].unroll(vu)
    s[b].vectorize(vv)
    mod, build = _build(s, [a, b])
    src = np.random.default_rng(0).standard_normal(n).astype("float32")
    xa, ya = _arrays(src, np.empty_like(src))
    mod(xa, ya)
    np.testing.assert_array_equal(ya.numpy(), src)
    seconds = _time_module(mod, [xa, ya])
    dst = np.empty_like(src)
    numpy_seconds = _median(lambda: np.copyto(dst, src))
    return Row(
        "copy", threads, seconds, 2 * src.nbytes / seconds / 1e9, "GB/s", numpy_seconds, build, 1.0
    )


# -- kernels -----------------------------------------------------------------------------------------


def bench_gemm(n: int, threads: int) -> Row:
    from tensorforge import ops

    s, args = ops.schedule_matmul(n, n, n, parallel=threads > 1)
    mod, build = _build(s, args)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype("float32")
    b = rng.uniform(-1, 1, (n, n)).astype("float32")
    A, B, C = _arrays(a, b, np.empty((n, n), "float32"))
    # NOTE: ours is timed before numpy's matmul first runs: OpenBLAS's threads keep spinning for
    # a while after a call and took a core from our kernel (the demo measured 0.3-0.7x so)
    seconds = _time_module(mod, [A, B, C])
    np.testing.assert_allclose(C.numpy(), a @ b, rtol=1e-3, atol=1e-3)
    numpy_seconds = _median(lambda: a @ b)
    return Row(
        f"gemm{n}", threads, seconds, 2.0 * n**3 / seconds / 1e9, "GFLOP/s", numpy_seconds, build
    )


def bench_chain(threads: int) -> Row:
    from tensorforge import ops

    n = 4096
    x, y = ops.fused_chain(n, n, scale=0.5)
    s = ops.schedule_elementwise(y, parallel=threads > 1)
    mod, build = _build(s, [x, y])
    xa = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    X, Y = _arrays(xa, np.empty_like(xa))
    mod(X, Y)

    def reference():
        return 1 / (1 + np.exp(-(np.maximum(xa, 0) * 0.5 + 1)))

    np.testing.assert_allclose(Y.numpy(), reference(), rtol=1e-5, atol=1e-6)
    seconds = _time_module(mod, [X, Y])
    return Row(
        "chain",
        threads,
        seconds,
        2 * xa.nbytes / seconds / 1e9,
        "GB/s",
        _median(reference, 3),
        build,
    )


def bench_softmax(threads: int) -> Row:
    from tensorforge.ops.softmax import schedule_softmax

    n = 4096
    s, args = schedule_softmax(n, n, parallel=threads > 1)
    mod, build = _build(s, args)
    xa = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
    X, Y = _arrays(xa, np.empty_like(xa))
    mod(X, Y)

    def reference():
        e = np.exp(xa - xa.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    np.testing.assert_allclose(Y.numpy(), reference(), rtol=1e-5, atol=1e-8)
    seconds = _time_module(mod, [X, Y])
    return Row(
        "softmax",
        threads,
        seconds,
        2 * xa.nbytes / seconds / 1e9,
        "GB/s",
        _median(reference, 3),
        build,
    )


def bench_layernorm(threads: int) -> Row:
    from tensorforge.ops.layer_norm import schedule_layer_norm

    n = 4096
    s, args = schedule_layer_norm(n, n, parallel=threads > 1)
    mod, build = _build(s, args)
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((n, n)).astype("float32")
    g = rng.standard_normal(n).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    X, G, B, Y = _arrays(xa, g, b, np.empty_like(xa))
    mod(X, G, B, Y)

    def reference():
        mean = xa.mean(axis=1, keepdims=True)
        return (xa - mean) / np.sqrt(xa.var(axis=1, keepdims=True) + 1e-5) * g + b

    np.testing.assert_allclose(Y.numpy(), reference(), rtol=1e-3, atol=1e-3)
    seconds = _time_module(mod, [X, G, B, Y])
    return Row(
        "layernorm",
        threads,
        seconds,
        2 * xa.nbytes / seconds / 1e9,
        "GB/s",
        _median(reference, 3),
        build,
    )


def bench_conv2d(threads: int) -> Row:
    from tensorforge.ops.conv2d import schedule_conv2d

    c, h, w, f = 64, 56, 56, 64
    s, args = schedule_conv2d(1, c, h, w, f, parallel=threads > 1)
    mod, build = _build(s, args)
    rng = np.random.default_rng(0)
    d = rng.standard_normal((1, c, h, w)).astype("float32")
    wt = rng.standard_normal((f, c, 3, 3)).astype("float32")
    D, W, O = _arrays(d, wt, np.empty((1, f, h, w), "float32"))
    mod(D, W, O)
    w2 = wt.reshape(f, c * 9)

    def reference():  # im2col + OpenBLAS matmul
        dp = np.pad(d[0], ((0, 0), (1, 1), (1, 1)))
        cols = np.lib.stride_tricks.sliding_window_view(dp, (3, 3), axis=(1, 2))  # c, h, w, 3, 3
        cols = np.ascontiguousarray(cols.transpose(0, 3, 4, 1, 2)).reshape(c * 9, h * w)
        return (w2 @ cols).reshape(1, f, h, w)

    seconds = _time_module(mod, [D, W, O])  # before OpenBLAS runs (see bench_gemm)
    np.testing.assert_allclose(O.numpy(), reference(), rtol=1e-3, atol=1e-3)
    flops = 2.0 * f * c * 9 * h * w
    return Row(
        "conv2d", threads, seconds, flops / seconds / 1e9, "GFLOP/s", _median(reference, 5), build
    )


RUNNERS: dict[str, Callable[[int], Row]] = {
    "peak": bench_peak,
    "copy": bench_copy,
    "gemm1024": lambda t: bench_gemm(1024, t),
    "gemm2048": lambda t: bench_gemm(2048, t),
    "gemm1000": lambda t: bench_gemm(1000, t),
    "chain": bench_chain,
    "softmax": bench_softmax,
    "layernorm": bench_layernorm,
    "conv2d": bench_conv2d,
}


def run_cases(cases: list[str], threads: int) -> list[Row]:
    rows = [RUNNERS[name](threads) for name in cases]
    peak = next((r.rate for r in rows if r.case == "peak"), None)
    copy = next((r for r in rows if r.case == "copy"), None)
    bandwidth = None
    if copy is not None:
        # the machine's copy limit is the faster of our copy and numpy's (memcpy, which may use
        # non-temporal stores), so no kernel is flattered by a slow reference
        # (our own rate as it is where ours is the faster: rate * s / s can round past it)
        fastest = min(copy.seconds, copy.numpy_seconds or copy.seconds)
        bandwidth = copy.rate if fastest == copy.seconds else copy.rate * copy.seconds / fastest
    for r in rows:
        if r.case == "peak":
            continue
        limit = peak if r.unit == "GFLOP/s" else bandwidth
        r.limit_fraction = r.rate / limit if limit else None
    return rows


def print_table(rows: list[Row]) -> None:
    print(
        f"{'case':<10} {'thr':>3} {'time (ms)':>10} {'rate':>9} {'unit':<7} {'numpy (ms)':>10} "
        f"{'vs numpy':>8} {'of limit':>8} {'build (s)':>9}"
    )
    for r in rows:
        numpy_ms = f"{r.numpy_seconds * 1e3:10.2f}" if r.numpy_seconds else f"{'-':>10}"
        ratio = f"{r.ratio:8.2f}" if r.ratio is not None else f"{'-':>8}"
        limit = f"{r.limit_fraction:8.2f}" if r.limit_fraction is not None else f"{'-':>8}"
        print(
            f"{r.case:<10} {r.threads:>3} {r.seconds * 1e3:10.2f} {r.rate:9.1f} {r.unit:<7} {numpy_ms} "
            f"{ratio} {limit} {r.build_seconds:9.3f}"
        )


def bench_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tensorforge bench", description=__doc__)
    parser.add_argument(
        "--threads", default="1,2", help="thread counts, comma separated (default 1,2)"
    )
    parser.add_argument("--cases", default=",".join(CASES), help=f"subset of {','.join(CASES)}")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON lines")
    parser.add_argument(
        "--target",
        default="llvm",
        help='the CPU target every kernel is built for (default "llvm", this CPU; e.g. '
        '"llvm -mcpu=znver3" for AVX2 code on an AVX-512 host)',
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in RUNNERS]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if args.child:  # one thread count, rows as JSON on stdout
        with Target(args.target):
            for row in run_cases(cases, int(os.environ.get("TF_NUM_THREADS", "1"))):
                print("ROW " + json.dumps(asdict(row)), flush=True)
        return 0
    rows: list[Row] = []
    for threads in [int(t) for t in args.threads.split(",")]:
        env = dict(
            os.environ,
            TF_NUM_THREADS=str(threads),
            OPENBLAS_NUM_THREADS=str(threads),
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
        )
        cmd = [
            sys.executable,
            "-m",
            "tensorforge.cli",
            "bench",
            "--child",
            "--cases",
            ",".join(cases),
            "--target",
            args.target,
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return proc.returncode
        rows += [
            Row(**json.loads(line[4:]))
            for line in proc.stdout.splitlines()
            if line.startswith("ROW ")
        ]
    print(f"target: {Target(args.target)}")
    print_table(rows)
    if args.json:
        with open(args.json, "w") as fh:
            for r in rows:
                fh.write(json.dumps(asdict(r) | {"ratio_vs_numpy": r.ratio}) + "\n")
    return 0
