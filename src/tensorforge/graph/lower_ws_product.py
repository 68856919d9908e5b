"""Half products on the warp-specialized wgmma kernel (ops/wgmma_ws.py, sm_90): a kernel of its
own, written by hand rather than scheduled, whose epilogue adds addmm's bias (or an mm's, an add
of a row of m after it) and a following GELU: those graph nodes (through views) are absorbed
(`epilogue_chain`, the lowerer's `replaced`); later element-wise nodes read the result from
memory in a kernel of theirs (a residual add too: FUSE_RESIDUAL).

Taken where the scheduled wgmma kernel (lower_tensor_core.py) measured behind it: k of 12 steps
of 64 or more over 128 x 128 tiles that fill half the SMs to 3 waves. H200, GPU time a call of
the compiled graph (benchmarks/gpu_graph_products.py, one run, eager in the same run; session
19's cooperative plan -> session 20's ping-pong plan with staged stores): 2048 x 768 x 3072 +
bias 22.1 -> 18.0 us (eager 15.1), the MLP 768-3072-768 of 2048 rows 48.1 -> 43.8 -> (bias and
GELU in the kernel, fc1 taken too) 37.7 (eager 41.7-42.1). ViT-B/16 fp16 batch 8 (profile_model.py,
eager 1074-1079 in the same run): 1757 -> 1706 (fc2 alone) -> 1422 us a call (qkv, fc1, fc2 and
the attention output here with their bias, GELU and residual fused; the residual and the
attention output then went back to the scheduled kernel, FUSE_RESIDUAL and _moves_whole_rows).
The left matrix is a whole buffer read as it is (a graph input or an earlier kernel's result,
reshaped or not: rows of 16-byte pieces, the copy engine's tensor map), or a copy of a view of
one that moves its rows whole (COPY_VIEWS: LayerNorm's [B, T] rows read as [T, B] by
attention's input projection); the right one a constant ([k, m], as the product reads it).
"""

from __future__ import annotations

import math

import torch

from tensorforge import te, tir
from tensorforge.codegen.base import KernelSource, Launch, Param, TensorMap
from tensorforge.errors import BuildError
from tensorforge.graph.lowered import KernelSpec
from tensorforge.graph.values import Anchor, Buffer, Lazy, is_static, read_buffer
from tensorforge.ir.arith import simplify_expr
from tensorforge.ops.wgmma_ws import CTYPES, EPILOGUE_CODES, ws_device_source
from tensorforge.ops.wgmma_ws_plan import K_STEP, WsPlan, choose_ws_plan
from tensorforge.te.expr import Const, TensorRead, Var, structural_equal

SOURCE = "cuda: warp-specialized wgmma, by hand (ops/wgmma_ws.py)"
MIN_STEPS = 12  # k steps of 64 from which the hand kernel is taken (768 terms: ViT-B's qkv,
# fc1 and attention output; session 20's first rule, 32 steps, took only fc2)
WS_PRODUCTS = True  # (benchmarks turn it off to measure the scheduled kernel alone)
PLAN = WsPlan(128, 4, 2, 1)  # 128 x 128 blocks, 4 stages: which products take the kernel, and
# its plan without PINGPONG
FUSE_EPILOGUES = True  # a following bias and GELU in the kernel (benchmarks turn it off to
# measure them as a kernel of their own). H200, one run, GPU time a call of the product and its
# epilogue (benchmarks/gpu_graph_products.py, ViT-B/16 batch 8 shapes; fused -> a kernel of
# their own; eager cuBLAS + torch): 1576 x 2304 x 768 + bias 12.0 -> 14.9 us (10.5), 1576 x
# 3072 x 768 + bias + GELU 19.6 -> 23.1 (19.7); the scheduled kernel (session 20's first rule)
# 23.6 and 30.4
FUSE_RESIDUAL = False  # the residual add too: it lost (1576 x 768 x 3072 + bias + residual 17.8
# fused, 17.3 apart (eager 14.6); 1576 x 768 x 768 8.5 against 7.9 (7.4)): the epilogue of each
# SM's last tile, not overlapped, then waits on the residual's loads
PINGPONG = True  # the plan by ops/wgmma_ws_plan.choose_ws_plan (benchmarks turn it off)
MAX_WAVES = 3  # of 128 x 128 tiles an SM, at most (2048 x 3072: 2.9)
COPY_VIEWS = True  # a left matrix whose rows are a buffer's rows in another order: copied for
# the hand kernel (ViT-B/16's qkv: LayerNorm's rows [B, T] read as [T, B], 1.9 us a copy; its
# attention output, rows gathered from heads' [B * H, T, 64], took 5.6 us: it stays scheduled)


def ws_sizes_fit(target, n, m, k: int, lead=()) -> bool:
    """sm_90, a 2-d product of static sizes over a long enough reduction (MIN_STEPS) whose
    128 x 128 tiles fill between half the SMs and MAX_WAVES times all of them, rows of 16-byte
    pieces."""
    if not (WS_PRODUCTS and target.kind == "cuda" and target.sm_version == 90):
        return False
    if lead or not all(isinstance(v, int) for v in (n, m, k)):
        return False
    tiles = PLAN.units(n, m)
    return k % 8 == 0 and m % 8 == 0 and k >= MIN_STEPS * K_STEP and target.sm_count // 2 <= tiles <= MAX_WAVES * target.sm_count  # fmt: skip


def wants_ws_product(target, n, m, k: int, lead, a, source, constant) -> bool:
    """ws_sizes_fit, the left matrix `a` a plain [rows >= n, k] buffer (`source`: its
    placeholder) and the right one a constant."""
    if source is None or constant is None or not ws_sizes_fit(target, n, m, k, lead):
        return False
    if len(a.reads) != 1 or next(iter(a.reads)).placeholder is not source:
        return False
    return _holds_rows(next(iter(a.reads)).shape, n, k)


def _holds_rows(shape, n: int, k: int) -> bool:
    """A row-major buffer of `shape` holds n rows of k first: [rows >= n, k], or n x k values
    in any shape (LayerNorm's [B, T, k] read as [B * T, k])."""
    if not is_static(shape) or not shape:
        return False
    return (shape[-1] == k and math.prod(shape[:-1]) >= n) or math.prod(shape) == n * k


def ws_left_operand(ctx, n, m, k: int, lead, a, constant, dtype):
    """The left matrix as the hand kernel reads it where it takes the product, else None: `a`
    where it is a plain buffer; a copy where it is an index view of one (attention's input
    projection reads LayerNorm's rows transposed, [T, B] for [B, T]: the scheduled kernel
    gathered them in its load stage), when COPY_VIEWS."""
    from tensorforge.graph.lower_tensor_core import plain_source  # (it imports this module)

    source = plain_source(a.at, a.shape, dtype)
    if source is None and a.source is not None and a.anchor is None and tuple(a.shape) == (n, k):
        source = a.source.placeholder  # (a buffer's whole content, reshaped: rows all the same)
    if wants_ws_product(ctx.target, n, m, k, lead, a, source, constant):
        return a
    if not COPY_VIEWS or source is not None or constant is None or a.ndim != 2:
        return None
    if a.anchor is not None or a.cost > 1 or len(a.reads) != 1 or tuple(a.shape) != (n, k):
        return None
    if not _moves_whole_rows(a, k):
        return None
    if not ws_sizes_fit(ctx.target, n, m, k, lead):
        return None
    copies = ctx.__dict__.setdefault("ws_copies", {})  # (a view two products read: one copy)
    if id(a) not in copies:
        copies[id(a)] = (a, ctx.materialize(a))
    copy = copies[id(a)][1]
    source = plain_source(copy.at, copy.shape, dtype)
    return copy if wants_ws_product(ctx.target, n, m, k, lead, copy, source, constant) else None


def _moves_whole_rows(a, k: int) -> bool:
    """Whether index view `a` [n, k] reads each row as one whole row of its buffer [..., k]."""
    i, j = Var("i", "int32"), Var("j", "int32")
    e = a.at((i, j))
    if not isinstance(e, TensorRead) or not e.indices:
        return False
    length = e.tensor.shape[-1]
    if not (isinstance(length, Const) and length.value == k):
        return False
    return structural_equal(simplify_expr(e.indices[-1]), j)


aten = torch.ops.aten
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _only_user(node):
    users = list(node.users)
    return users[0] if len(users) == 1 and users[0].op == "call_function" else None


def epilogue_chain(ctx, node, m: int, with_bias: bool):
    """The nodes after product `node` that the kernel's epilogue computes: views keeping rows
    of `m`, (`with_bias`) the add of a bias row of m, a GELU (erf), then the add of a residual
    of the same shape and dtype, each the only user of the one before (the added operands
    lowered already). (bias node, gelu, residual node, chain)."""
    chain, gelu = [], False
    dtype, count = ctx.dtype_of(node), math.prod(ctx.shape_of(node))

    def through_views(cur):
        while True:
            nxt = _only_user(cur)
            if nxt is None or nxt.target not in _VIEWS:
                return cur
            shape = ctx.shape_of(nxt)
            if not all(isinstance(s, int) for s in shape) or math.prod(shape) != count or shape[-1] != m:  # fmt: skip
                return cur
            chain.append(nxt)
            cur = nxt

    def operand_of(nxt, cur, shape):  # add(cur, other) with `other` lowered, of `shape`
        if nxt is None or nxt.target is not aten.add.Tensor or len(nxt.args) != 2 or nxt.kwargs:
            return None
        others = [o for o in nxt.args if o is not cur]
        other = others[0] if len(others) == 1 else None
        if not isinstance(other, torch.fx.Node) or (other not in ctx.env and other.op != "get_attr"):  # fmt: skip
            return None
        fits = ctx.shape_of(nxt) == ctx.shape_of(cur) and ctx.dtype_of(nxt) == dtype
        return other if fits and ctx.shape_of(other) == shape and ctx.dtype_of(other) == dtype else None  # fmt: skip

    bias = None
    cur = through_views(node)
    nxt = _only_user(cur)
    if with_bias:  # (an mm: an add of a row of m, as attention's input projection has)
        bias = operand_of(nxt, cur, (m,))
        if bias is not None:
            chain.append(nxt)
            cur = through_views(nxt)
            nxt = _only_user(cur)
    if nxt is not None and nxt.target is aten.gelu.default and nxt.args[0] is cur:
        approximate = nxt.args[1] if len(nxt.args) > 1 else nxt.kwargs.get("approximate", "none")
        if approximate == "none" and ctx.dtype_of(nxt) == dtype:
            chain.append(nxt)
            gelu = True
            cur = through_views(nxt)
            nxt = _only_user(cur)
    residual = operand_of(nxt, cur, ctx.shape_of(cur)) if FUSE_RESIDUAL else None
    if residual is not None:
        chain.append(nxt)
    while chain and chain[-1].target in _VIEWS:  # (views after the last op: lowered as usual)
        chain.pop()
    return bias, gelu, residual, chain


def _value_of(ctx, node):
    """A lowered node's value; a constant the walk has not reached yet (make_fx puts a get_attr
    before its first use: the add after the product) as one of its own."""
    if node in ctx.env:
        return ctx.env[node]
    return ctx.add_constant(getattr(ctx.gm, node.target), node.name)


def _whole_buffer(ctx, value, count: int, dtype: str):
    """The buffer a graph value is the whole contiguous content of (materialized if needed),
    or None where it is not `count` elements of `dtype`."""
    if not isinstance(value, Lazy) or value.dtype != dtype or not is_static(value.shape):
        return None
    if math.prod(value.shape) != count:
        return None
    value = ctx.materialize(value)
    return value.source


def ws_addmm(ctx, node, bias, a, constant):
    """addmm(bias, a, constant) by the hand kernel, the bias added in its epilogue (and a
    following GELU and residual add: `epilogue_chain`), or None where it does not take it."""
    dtype = ctx.dtype_of(node)
    if (
        not FUSE_EPILOGUES
        or dtype not in CTYPES
        or not isinstance(a, Lazy)
        or a.ndim != 2
        or constant is None
    ):
        return None
    shape = ctx.shape_of(node)
    n, m = shape
    if not isinstance(bias, Lazy) or bias.dtype != dtype or not is_static(bias.shape):
        return None
    if math.prod(bias.shape) != m or (len(bias.shape) == 2 and bias.shape[0] != 1):
        return None
    if not ws_sizes_fit(ctx.target, n, m, int(a.shape[-1])):
        return None
    a = ws_left_operand(ctx, n, m, int(a.shape[-1]), [], a, constant, dtype)
    if a is None:
        return None
    bias_buf = _whole_buffer(ctx, bias, m, dtype)
    if bias_buf is None:
        return None
    return ws_product(ctx, node, a, constant, shape, dtype, bias=bias_buf)


def ws_product(ctx, node, a, constant, shape, dtype, bias: Buffer | None = None):
    """The product `a @ constant` by the hand kernel (+ `bias`, and the epilogue_chain of an
    mm or an addmm whose bias this is): a Lazy reading its result buffer."""
    n, m = shape
    (a_buf,) = a.reads  # (wants_ws_product: the one buffer, `source`)
    gelu, res_buf, chain = False, None, []
    mm = node.target is aten.mm.default
    if FUSE_EPILOGUES and (bias is not None or mm):
        bias_node, gelu, residual, chain = epilogue_chain(ctx, node, m, bias is None)
        if bias_node is not None:
            bias = _whole_buffer(ctx, _value_of(ctx, bias_node), m, dtype)
        if residual is not None:
            res_buf = _whole_buffer(ctx, _value_of(ctx, residual), n * m, dtype)
        if (bias_node is not None and bias is None) or (residual is not None and res_buf is None):  # fmt: skip
            gelu, res_buf, chain = False, None, []  # (not whole buffers: kernels of their own)
    epilogue = "_".join(p for p, on in (("bias", bias), ("gelu", gelu), ("residual", res_buf)) if on)  # fmt: skip
    epilogue = epilogue or "none"
    assert epilogue in EPILOGUE_CODES, epilogue
    b = ctx.add_constant(constant.contiguous(), f"{node.name}_b")
    name = ctx.unique(chain[-1].name if chain else node.name)
    extra = [x for x in (bias, res_buf) if x is not None]

    def fcompute(ins, outs):  # (never built: program.py builds ws_kernel_source instead; a
        # build of this stage fails at nvcc on the undefined function, never runs empty)
        return tir.call_extern("handle", "tf_ws_gemm_is_built_by_hand")

    out = te.extern(shape, [a_buf.placeholder, b.source.placeholder] + [x.placeholder for x in extra], fcompute, name=f"{name}_out", dtype=dtype)  # fmt: skip
    last = chain[-1] if chain else node
    holds = last.name if tuple(ctx.shape_of(last)) == tuple(shape) else None
    buf = Buffer(name, tuple(shape), dtype, "temp", holds)
    reads = [a_buf, b.source, *extra]
    k = int(a.shape[-1])
    plan = choose_ws_plan(n, m, k, ctx.target.sm_count, pingpong=True) if PINGPONG else PLAN
    info = {"shape": tuple(shape), "stages": [], "plan": plan, "k": k, "epilogue": epilogue}
    nodes = (node.name, *(c.name for c in chain))
    anchor = Anchor("ws_gemm", out, frozenset(reads), nodes, info)
    spec = KernelSpec(f"k{len(ctx.program.steps)}_{name}", out, buf, reads, anchor, nodes)
    ctx.program.steps.append(spec)
    for c in chain:  # (the intermediate nodes' values: only the chain reads them)
        ctx.replaced[c] = read_buffer(buf, ctx.shape_of(c))
    return read_buffer(buf)


def ws_kernel_source(spec: KernelSpec, target) -> KernelSource:
    """The KernelSource of a "ws_gemm" step: the kernel with the sizes written in, its buffers
    (left matrix, right matrix, result) and their tensor maps."""
    a_buf, b_buf, *extra = spec.reads
    plan, k = spec.anchor.info["plan"], spec.anchor.info["k"]
    epilogue = spec.anchor.info.get("epilogue", "none")
    n, m = spec.anchor.info["shape"]
    dtype = spec.buffer.dtype
    if not _holds_rows(a_buf.shape, n, k):
        raise BuildError(f"{spec.name}: left matrix {a_buf} is not [{n}, {k}] rows")
    ctype = CTYPES[dtype]
    tm, tn = plan.tiles(n, m)
    entry = spec.name
    bias_buf = extra.pop(0) if "bias" in epilogue else None
    res_buf = extra.pop(0) if "residual" in epilogue else None
    bias_arg, res_arg = ("bias" if bias_buf else "d"), ("res" if res_buf else "d")
    text = ws_device_source(plan.bn) + (
        f'extern "C" __global__ void __launch_bounds__({plan.threads}, 1) {entry}(\n'
        f"    const tf_tensor_map* __restrict__ ma, const tf_tensor_map* __restrict__ mb,\n"
        f"    {ctype}* __restrict__ a, {ctype}* __restrict__ b,"
        + (f" {ctype}* __restrict__ bias," if bias_buf else "")
        + (f" {ctype}* __restrict__ res," if res_buf else "")
        + f" {ctype}* __restrict__ d) {{\n"
        f"  tf_ws_body<{plan.template_args(ctype, EPILOGUE_CODES[epilogue])}>(\n"
        f"      ma, mb, d, {bias_arg}, {res_arg}, nullptr, nullptr, {n}, {m}, {k}, {tm}, {tn}, 1);\n"
        f"}}\n"
    )
    params = (
        Param(a_buf.name, "buffer", dtype, tuple(a_buf.shape)),
        Param(b_buf.name, "buffer", dtype, tuple(b_buf.shape)),
        *((Param(bias_buf.name, "buffer", dtype, tuple(bias_buf.shape)),) if bias_buf else ()),
        *((Param(res_buf.name, "buffer", dtype, tuple(res_buf.shape)),) if res_buf else ()),
        Param(spec.out.name, "buffer", dtype, (n, m), written=True),
    )
    maps = (
        TensorMap(a_buf.name, dtype, n, k, plan.bm),
        TensorMap(b_buf.name, dtype, k, m, K_STEP),
    )
    launch = Launch((min(plan.units(n, m), target.sm_count), 1, 1), (plan.threads, 1, 1), plan.shared_bytes())  # fmt: skip
    # (staged: 16-byte stores of D and loads of the residual)
    aligned = tuple((p, 16) for p in (spec.out.name, res_buf and res_buf.name) if p) if plan.staged else ()  # fmt: skip
    return KernelSource(
        "cuda", entry, text, params, launch, str(target), vector_alignment=aligned, tensor_maps=maps
    )
