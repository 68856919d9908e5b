"""Half products on the warp-specialized wgmma kernel (ops/wgmma_ws.py, sm_90): a kernel of its
own, written by hand rather than scheduled, whose result later element-wise nodes (bias,
residual, GELU) read from memory in a kernel of theirs.

Taken where the scheduled wgmma kernel (lower_tensor_core.py) measured far behind it: a long
reduction over tiles that fill the SMs about once. H200, GPU time a call of the compiled graph
(benchmarks/gpu_graph_products.py, one run, eager in the same run; session 19's cooperative
plan -> session 20's ping-pong plan with staged stores, ops/wgmma_ws_plan.choose_ws_plan):
2048 x 768 x 3072 + bias 22.1 -> 18.0 us (eager 15.1), + residual 22.3 -> 18.2 (eager 17.3),
the MLP 768-3072-768 of 2048 rows 48.1 -> 43.8 (eager 42.1); ViT-B/16 fp16 batch 8 (its fc2)
1757 -> 1706 us a call (eager 1080). Where the reduction is short the scheduled kernel keeps
its fused epilogue: taking every product here (variant ws_all: MIN_STEPS 1, MAX_WAVES 99)
made 2048 x 2304 x 768 + bias 21.9 -> 18.0 but 2048 x 3072 x 768 + GELU 25.1 -> 26.0 and the
MLP 43.8 -> 46.2 (GELU then a kernel of its own), ViT-B/16 1706 -> 1710 (its qkv and fc1 read
LayerNorm's result computed in their prologue, so they never come here).
The left matrix is a whole buffer read as it is (a graph input or an earlier kernel's result,
rows of 16-byte pieces: the copy engine's tensor map), the right one a constant ([k, m], as
the product reads it).
"""

from __future__ import annotations

import math

from tensorforge import te, tir
from tensorforge.codegen.base import KernelSource, Launch, Param, TensorMap
from tensorforge.errors import BuildError
from tensorforge.graph.lowered import KernelSpec
from tensorforge.graph.values import Anchor, Buffer, read_buffer
from tensorforge.ops.wgmma_ws import CTYPES, ws_device_source
from tensorforge.ops.wgmma_ws_plan import K_STEP, WsPlan, choose_ws_plan

SOURCE = "cuda: warp-specialized wgmma, by hand (ops/wgmma_ws.py)"
MIN_STEPS = 32  # k steps of 64 from which the hand kernel is taken (2048 x 768 x 3072: 48)
WS_PRODUCTS = True  # (benchmarks turn it off to measure the scheduled kernel alone)
PLAN = WsPlan(128, 4, 2, 1)  # 128 x 128 blocks, 4 stages: which products take the kernel, and
# its plan without PINGPONG
PINGPONG = True  # the plan by ops/wgmma_ws_plan.choose_ws_plan (benchmarks turn it off)
MAX_WAVES = 1  # of tiles an SM, at most (more: measured against the scheduled kernel only in
# benchmarks/gpu_graph_products.py's variant ws_all)


def wants_ws_product(target, n, m, k: int, lead, a, source, constant) -> bool:
    """sm_90, a 2-d product of static sizes over a long reduction (MIN_STEPS) whose 128 x 128
    tiles fill between half the SMs and MAX_WAVES times all of them, the left matrix `a` a
    plain [rows >= n, k] buffer (`source`: its placeholder) and the right one a constant, rows
    of 16-byte pieces."""
    if not (WS_PRODUCTS and target.kind == "cuda" and target.sm_version == 90):
        return False
    if lead or source is None or constant is None or not all(isinstance(v, int) for v in (n, m, k)):  # fmt: skip
        return False
    if len(a.reads) != 1 or next(iter(a.reads)).placeholder is not source:
        return False
    shape = next(iter(a.reads)).shape
    if len(shape) != 2 or shape[1] != k or not isinstance(shape[0], int) or shape[0] < n:
        return False
    tiles = PLAN.units(n, m)
    return k % 8 == 0 and m % 8 == 0 and k >= MIN_STEPS * K_STEP and target.sm_count // 2 <= tiles <= MAX_WAVES * target.sm_count  # fmt: skip


def ws_product(ctx, node, a, constant, shape, dtype):
    """The product `a @ constant` by the hand kernel: a Lazy reading its result buffer."""
    n, m = shape
    (a_buf,) = a.reads  # (wants_ws_product: the one buffer, `source`)
    b = ctx.add_constant(constant.contiguous(), f"{node.name}_b")
    name = ctx.unique(node.name)

    def fcompute(ins, outs):  # (never built: program.py builds ws_kernel_source instead; a
        # build of this stage fails at nvcc on the undefined function, never runs empty)
        return tir.call_extern("handle", "tf_ws_gemm_is_built_by_hand")

    out = te.extern(shape, [a_buf.placeholder, b.source.placeholder], fcompute, name=f"{name}_out", dtype=dtype)  # fmt: skip
    buf = Buffer(name, tuple(shape), dtype, "temp", node.name)
    reads = [a_buf, b.source]
    k = int(a.shape[-1])
    plan = choose_ws_plan(n, m, k, ctx.target.sm_count, pingpong=True) if PINGPONG else PLAN
    info = {"shape": tuple(shape), "stages": [], "plan": plan, "k": k}
    anchor = Anchor("ws_gemm", out, frozenset(reads), (node.name,), info)
    spec = KernelSpec(f"k{len(ctx.program.steps)}_{name}", out, buf, reads, anchor, (node.name,))
    ctx.program.steps.append(spec)
    return read_buffer(buf)


def ws_kernel_source(spec: KernelSpec, target) -> KernelSource:
    """The KernelSource of a "ws_gemm" step: the kernel with the sizes written in, its buffers
    (left matrix, right matrix, result) and their tensor maps."""
    a_buf, b_buf = spec.reads
    plan, k = spec.anchor.info["plan"], spec.anchor.info["k"]
    n, m = spec.anchor.info["shape"]
    dtype = spec.buffer.dtype
    rows = math.prod(a_buf.shape[:-1])
    if a_buf.shape[-1] != k or rows < n:
        raise BuildError(f"{spec.name}: left matrix {a_buf} is not [{n}, {k}] rows")
    ctype = CTYPES[dtype]
    tm, tn = plan.tiles(n, m)
    entry = spec.name
    text = ws_device_source(plan.bn) + (
        f'extern "C" __global__ void __launch_bounds__({plan.threads}, 1) {entry}(\n'
        f"    const tf_tensor_map* __restrict__ ma, const tf_tensor_map* __restrict__ mb,\n"
        f"    {ctype}* __restrict__ a, {ctype}* __restrict__ b, {ctype}* __restrict__ d) {{\n"
        f"  tf_ws_body<{plan.template_args(ctype, 0)}>(\n"
        f"      ma, mb, d, d, d, nullptr, nullptr, {n}, {m}, {k}, {tm}, {tn}, 1);\n"
        f"}}\n"
    )
    params = (
        Param(a_buf.name, "buffer", dtype, tuple(a_buf.shape)),
        Param(b_buf.name, "buffer", dtype, tuple(b_buf.shape)),
        Param(spec.out.name, "buffer", dtype, (n, m), written=True),
    )
    maps = (
        TensorMap(a_buf.name, dtype, n, k, plan.bm),
        TensorMap(b_buf.name, dtype, k, m, K_STEP),
    )
    launch = Launch((min(plan.units(n, m), target.sm_count), 1, 1), (plan.threads, 1, 1), plan.shared_bytes())  # fmt: skip
    aligned = ((spec.out.name, 16),) if plan.staged else ()  # (staged: 16-byte stores of D)
    return KernelSource(
        "cuda", entry, text, params, launch, str(target), vector_alignment=aligned, tensor_maps=maps
    )
