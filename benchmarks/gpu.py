"""GPU benchmarks on one run: GEMM vs cuBLAS (TF32 off), the element-wise chain and row softmax vs
torch eager and torch.compile, all against a device-to-device copy's bandwidth.

Run on the GPU machine: python benchmarks/gpu.py [--json out.jsonl] [--quick]
"""

from __future__ import annotations

import json
import sys

import numpy as np

import tensorforge as tf
from tensorforge import te
from tensorforge.ops import fused_chain
from tensorforge.ops.cuda import (
    schedule_elementwise_cuda,
    schedule_matmul_cuda,
    schedule_softmax_cuda,
)


def tvm_style_sgemm(n: int, m: int, k: int, double_buffer: bool = True):
    """SGEMM as TVM's GPU GEMM recipe writes it (no tensorforge-specific tricks).

    128 x 128 block tiles of 16 x 16 threads; each thread runs 2 x 2 virtual threads of a 4 x 4
    accumulator (8 x 8 outputs, two strips 64 apart each way); A and B staged in shared memory
    by `cache_read` (8-deep k slices, float4 loads, `double_buffer()` as TVM's recipe
    apps/topi_recipe/gemm/cuda_gemm_square.py has it), copied to registers by a local
    `cache_read`, accumulated in a local `cache_write`.
    """
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    AL = s.cache_read(AA, "local", [C])
    BL = s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")
    block, threads, vthreads, k_tile = 128, 16, 2, 8
    thread_y = te.thread_axis((0, threads), "threadIdx.y")
    thread_x = te.thread_axis((0, threads), "threadIdx.x")
    by, yi = s[C].split(C.op.axis[0], factor=block)
    bx, xi = s[C].split(C.op.axis[1], factor=block)
    vy, yi = s[C].split(yi, nparts=vthreads)
    vx, xi = s[C].split(xi, nparts=vthreads)
    ty, yi = s[C].split(yi, nparts=threads)
    tx, xi = s[C].split(xi, nparts=threads)
    s[C].reorder(by, bx, vy, vx, ty, tx, yi, xi)
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(vy, te.thread_axis((0, vthreads), "vthread", name="vy"))
    s[C].bind(vx, te.thread_axis((0, vthreads), "vthread", name="vx"))
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[CC].compute_at(s[C], tx)
    yo, xo = CC.op.axis
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=k_tile)
    s[CC].reorder(ko, ki, yo, xo)
    s[CC].unroll(ki)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    s[AL].compute_at(s[CC], ki)
    s[BL].compute_at(s[CC], ki)
    for stage in (s[AA], s[BB]):  # cooperative fetch: each thread loads float4s
        fused = stage.fuse(*stage.op.axis)
        rest, vec = stage.split(fused, factor=4)
        rest, tx_part = stage.split(rest, factor=threads)
        _, ty_part = stage.split(rest, factor=threads)
        stage.bind(ty_part, thread_y)
        stage.bind(tx_part, thread_x)
        stage.vectorize(vec)
        if double_buffer:
            stage.double_buffer()
    return s, [A, B, C]


def torch_time(fn, repeat=20) -> float:
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


def ours_time(mod, arrays) -> float:
    return mod.time_evaluator(mod.entry_name, tf.cuda(0), number=10, repeat=5)(*arrays).median


def half_precision_rows(rows: list, quick: bool) -> None:
    """fp16 / bf16 tensor-core GEMMs (ops/gemm_fp16.py) beside cuBLAS through torch: plain at
    4096^3 and 8192^3, batched, and with a fused bias + GELU epilogue (vs torch's addmm + gelu)."""
    import torch
    import torch.nn.functional as F

    from tensorforge.ops.gemm_fp16 import schedule_gemm_fp16
    from tensorforge.te.dtype import from_bfloat16, to_bfloat16

    dev = tf.cuda(0)
    rng = np.random.default_rng(1)

    def operand(shape, dtype):
        """(tensorforge array, torch tensor) holding the same 16-bit values."""
        x = rng.uniform(-1, 1, shape).astype("float32")
        if dtype == "bfloat16":
            bits = to_bfloat16(x)
            return tf.nd.array(bits, dev), torch.from_numpy(from_bfloat16(bits)).cuda().bfloat16()
        half = x.astype("float16")
        return tf.nd.array(half, dev), torch.from_numpy(half).cuda()

    def as_float(arr, dtype):
        out = arr.numpy()
        return from_bfloat16(out) if dtype == "bfloat16" else out.astype("float32")

    cases = [("float16", (1024,) * 3, None, "none")] if quick else [
        ("float16", (4096,) * 3, None, "none"),
        ("bfloat16", (4096,) * 3, None, "none"),
        ("float16", (8192,) * 3, None, "none"),
        ("bfloat16", (8192,) * 3, None, "none"),
        ("float16", (1024,) * 3, 16, "none"),
        ("float16", (4096,) * 3, None, "bias_gelu"),
        ("float16", (8192, 3072, 768), None, "bias_gelu"),  # a transformer FFN's first GEMM
        ("float16", (2048, 3072, 768), None, "bias_gelu"),
    ]  # fmt: skip
    for dtype, (m, n, k), batch, epilogue in cases:
        lead = (batch,) if batch else ()
        A, ta = operand((*lead, m, k), dtype)
        B, tb = operand((*lead, k, n), dtype)
        arrays = [A, B]
        if epilogue != "none":
            bias, tbias = operand((n,), dtype)
            arrays.append(bias)
        D = tf.nd.empty((*lead, m, n), "uint16" if dtype == "bfloat16" else dtype, dev)
        s, args = schedule_gemm_fp16(m, n, k, dtype, epilogue=epilogue, batch=batch)
        mod = tf.build(s, args, target="cuda")
        mod(*arrays, D)
        ref = torch.matmul(ta.float(), tb.float())
        if epilogue == "bias_gelu":
            ref = F.gelu(ref + tbias.float())
        ref = ref.cpu().numpy()
        err = np.linalg.norm(as_float(D, dtype) - ref) / np.linalg.norm(ref)
        limit = 2e-2 if dtype == "bfloat16" else 2e-3
        assert err < limit, f"{dtype} gemm {m}x{n}x{k}: relative error {err}"
        if epilogue == "bias_gelu":
            theirs = torch_time(lambda x=ta, y=tb, c=tbias: F.gelu(torch.addmm(c, x, y)))
            their_name = "cuBLAS+gelu"
        else:
            theirs = torch_time(lambda x=ta, y=tb: torch.matmul(x, y))
            their_name = "cuBLAS"
        ours = ours_time(mod, [*arrays, D])
        flops = 2.0 * m * n * k * (batch or 1)
        shape = f"{m}^3" if m == n == k else f"{m}x{n}x{k}"
        name = f"{dtype} {'b' + str(batch) + ' ' if batch else ''}gemm {shape}"
        name += " +bias+gelu" if epilogue != "none" else ""
        rows.append(
            dict(case=name, impl="tensorforge", seconds=ours, rate=flops / ours / 1e12,
                 unit="TFLOP/s", vs=theirs / ours, vs_name=their_name, rel_error=float(err))
        )  # fmt: skip
        rows.append(
            dict(case=name, impl=their_name, seconds=theirs, rate=flops / theirs / 1e12,
                 unit="TFLOP/s")
        )  # fmt: skip
        del A, B, D, ta, tb, ref
        torch.cuda.empty_cache()


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    quick = "--quick" in sys.argv
    dev = tf.cuda(0)
    rng = np.random.default_rng(0)
    rows = []
    if "--half-only" in sys.argv:  # just the fp16 / bf16 tensor-core rows
        half_precision_rows(rows, quick)
        return print_rows(rows)

    # copy bandwidth: the roof for memory-bound kernels (a large copy, so caches do not flatter it)
    n = 4096
    big = torch.randn(8192, 8192, device="cuda")
    big_out = torch.empty_like(big)
    copy_s = torch_time(lambda big=big, out=big_out: out.copy_(big))
    copy_gbs = 2 * big.numel() * 4 / copy_s / 1e9
    rows.append(
        dict(case="copy 8192^2", impl="torch copy_", seconds=copy_s, rate=copy_gbs, unit="GB/s")
    )
    del big, big_out

    # GEMM
    for size in [1024] if quick else [1024, 4096]:
        a = rng.uniform(-1, 1, (size, size)).astype("float32")
        b = rng.uniform(-1, 1, (size, size)).astype("float32")
        A, B, C = (
            tf.nd.array(a, dev),
            tf.nd.array(b, dev),
            tf.nd.empty((size, size), "float32", dev),
        )
        ref = a.astype("float64") @ b.astype("float64")
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        flops = 2.0 * size**3
        cublas = torch_time(lambda ta=ta, tb=tb: ta @ tb)
        schedules = [
            ("tensorforge", schedule_matmul_cuda(size, size, size)),
            ("TVM-style", tvm_style_sgemm(size, size, size)),
        ]
        for impl, (s, args) in schedules:
            mod = tf.build(s, args, target="cuda")
            mod(A, B, C)
            err = np.linalg.norm(C.numpy() - ref) / np.linalg.norm(ref)
            assert err < 1e-5, f"gemm {size} ({impl}): relative error {err}"
            ours = ours_time(mod, [A, B, C])
            rows.append(
                dict(
                    case=f"gemm {size}^3",
                    impl=impl,
                    seconds=ours,
                    rate=flops / ours / 1e12,
                    unit="TFLOP/s",
                    vs=cublas / ours,
                    vs_name="cuBLAS",
                )
            )
        rows.append(
            dict(
                case=f"gemm {size}^3",
                impl="cuBLAS",
                seconds=cublas,
                rate=flops / cublas / 1e12,
                unit="TFLOP/s",
            )
        )

    # element-wise chain and softmax: ours vs torch eager vs torch.compile
    xa = rng.standard_normal((n, n)).astype("float32")
    X, Y = tf.nd.array(xa, dev), tf.nd.empty((n, n), "float32", dev)
    xt = torch.from_numpy(xa).cuda()
    moved = 2 * xa.nbytes

    def chain_eager(t):
        return torch.sigmoid(torch.relu(t) * 2 + 1)

    def softmax_eager(t):
        return torch.softmax(t, dim=1)

    x, y = fused_chain(n, n)
    cases = [
        (
            "chain sigmoid(relu(x)*2+1)",
            tf.build(schedule_elementwise_cuda(y), [x, y], target="cuda"),
            chain_eager,
            lambda v: 1 / (1 + np.exp(-(np.maximum(v, 0) * 2 + 1))),
        ),
    ]
    s, args = schedule_softmax_cuda(n, n)
    cases.append(
        (
            "row softmax",
            tf.build(s, args, target="cuda"),
            softmax_eager,
            lambda v: (
                np.exp(v - v.max(1, keepdims=True))
                / np.exp(v - v.max(1, keepdims=True)).sum(1, keepdims=True)
            ),
        )
    )
    for name, mod, eager, reference in cases:
        mod(X, Y)
        np.testing.assert_allclose(Y.numpy(), reference(xa), rtol=1e-4, atol=1e-6)
        ours = ours_time(mod, [X, Y])
        eager_s = torch_time(lambda eager=eager: eager(xt))
        compiled = torch.compile(eager)
        compiled_s = torch_time(lambda compiled=compiled: compiled(xt))
        rows.append(
            dict(
                case=name,
                impl="tensorforge",
                seconds=ours,
                rate=moved / ours / 1e9,
                unit="GB/s",
                vs=compiled_s / ours,
                vs_name="torch.compile",
                of_copy=moved / ours / 1e9 / copy_gbs,
            )
        )
        rows.append(
            dict(
                case=name,
                impl="torch eager",
                seconds=eager_s,
                rate=moved / eager_s / 1e9,
                unit="GB/s",
            )
        )
        rows.append(
            dict(
                case=name,
                impl="torch.compile",
                seconds=compiled_s,
                rate=moved / compiled_s / 1e9,
                unit="GB/s",
                of_copy=moved / compiled_s / 1e9 / copy_gbs,
            )
        )

    half_precision_rows(rows, quick)
    print_rows(rows)


def print_rows(rows: list) -> None:
    import torch

    if "--json" in sys.argv:
        path = sys.argv[sys.argv.index("--json") + 1]
        with open(path, "w") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")
    print(f"\n{torch.cuda.get_device_name()} | torch {torch.__version__} | TF32 off")
    print(
        f"{'case':<38} {'impl':<14} {'time (us)':>10} {'rate':>9} {'unit':<8} {'speedup':>16} {'of copy':>8}"
    )
    for r in rows:
        vs = f"{r['vs']:6.2f}x {r['vs_name']}" if "vs" in r else ""
        of_copy = f"{r['of_copy']:8.2f}" if "of_copy" in r else ""
        print(
            f"{r['case']:<38} {r['impl']:<14} {r['seconds'] * 1e6:10.1f} {r['rate']:9.1f} {r['unit']:<8} "
            f"{vs:>16} {of_copy}"
        )


if __name__ == "__main__":
    main()
