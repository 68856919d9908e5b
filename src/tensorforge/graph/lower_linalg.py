"""Matrix products as anchors (mm, addmm, bmm; convolutions: lower_conv.py), and embedding.

Weights are constants: a constant right-hand matrix is packed once, at compile time, into the
column panels the CPU matmul schedule reads (`packed[j // nr][k][j % nr]`, zero-padded), or,
for bfloat16 on a CPU with its dot instruction, the dot micro-kernel's (lower_cpu_dot.py).
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.lower_conv_gemm import matmul_split_k
from tensorforge.graph.lower_cpu_dot import (
    cpu_dot_bmm,
    cpu_dot_product,
    wants_cpu_dot,
    wants_cpu_dot_bmm,
)
from tensorforge.graph.lower_tensor_core import (
    can_pad_for_tensor_cores,
    padded_operands,
    tensor_core_product,
    wants_tensor_cores,
)
from tensorforge.graph.lower_views import rows_contiguous
from tensorforge.graph.lower_ws_product import ws_addmm
from tensorforge.graph.registry import lowers
from tensorforge.graph.split_k import cuda_matmul_splits
from tensorforge.graph.values import (
    Anchor,
    Lazy,
    Unsupported,
    in_dtype,
    opmath_dtype,
)
from tensorforge.te import dtype as dt

aten = torch.ops.aten


def matmul_tiles(target, dtype: str = "float32") -> tuple[int, int]:
    """(mr, nr): the rows and columns of C a CPU micro-kernel keeps in vector registers."""
    lanes = target.vector_lanes(dtype)
    if target.vector_bits >= 512:
        # 12 x 2 zmm accumulators of 32 registers (two panel vectors and a broadcast besides):
        # a third fewer panel loads per multiply-add than 8 x 2, so less waiting on a panel that
        # comes from L3. GPT-2 block's matmuls at 1 thread, min thread time with the caches
        # swept before each call: qkv 2445 -> 2315 us, fc1 + GELU 3542 -> 3295, fc2 ~equal,
        # QK^T 174 -> 157; MLP at batch 64 equal (16 x 2 spills: 20% slower)
        return 12, 2 * lanes
    return 6, 2 * lanes  # 6 x 2 of 16 ymm registers


def pack_panels(b: torch.Tensor, nr: int) -> torch.Tensor:
    """b [k, m] -> [ceil(m / nr), k, nr], zero-padded: each panel's rows are contiguous."""
    k, m = b.shape
    panels = -(-m // nr)
    padded = torch.zeros(k, panels * nr, dtype=b.dtype)
    padded[:, :m] = b
    return padded.reshape(k, panels, nr).permute(1, 0, 2).contiguous()


def _matmul(ctx, node, a, b, batched: bool, right=None) -> Lazy:
    """`right`: the fx value of `b` (node.args[1] unless given: addmm's is args[2])."""
    right = node.args[1] if right is None else right
    dtype = ctx.dtype_of(node)
    if not dt.is_float(dtype):
        raise Unsupported("an integer matrix product")
    packs = _packs_at_run_time(ctx, node, right, batched, b)
    if packs and ctx.shape_of(node)[0] < PACK_MIN_ROWS:
        raise Unsupported(
            f"a product of {ctx.shape_of(node)[0]} rows whose right matrix is a transpose known "
            f"only at run time: eager torch's is faster on the CPU (packing it costs more than "
            f"the product saves under {PACK_MIN_ROWS} rows)"
        )
    if batched and dtype == "float32" and ctx.target.kind == "llvm":
        raised = _half_operands(ctx, node, (torch.bfloat16,))
        shape = ctx.shape_of(node)
        if raised and wants_cpu_dot_bmm(ctx.target, "bfloat16", shape, a.shape[-1]):
            a16, b16 = (ctx.view_of_memory(v) for v in raised)
            return cpu_dot_bmm(ctx, node, a16, b16, shape, dtype)
    if batched and dtype == "float32" and ctx.target.kind == "cuda":
        raised = _half_operands(ctx, node, (torch.float16, torch.bfloat16))
        shape = ctx.shape_of(node)
        half = ctx.dtype_of(node.args[0].args[0]) if raised else None
        if raised and can_pad_for_tensor_cores(ctx.target, half, shape):
            a16, right = ctx.view_of_memory(raised[0]), node.args[1].args[0]
            return _tensor_core_bmm(ctx, node, a16, raised[1], right, shape, half, dtype)
    a = ctx.view_of_memory(a)
    constant = ctx.constant(b) if not batched else None
    b = ctx.lazy(b)
    *lead, n, k = a.shape
    m = b.shape[-1]
    r = te.reduce_axis((0, k), name="k")
    acc = opmath_dtype(dtype)  # half products accumulate in float32, rounded once (as eager)
    shape = ctx.shape_of(node)
    if wants_cpu_dot(ctx.target, dtype, shape, k, constant):
        return cpu_dot_product(ctx, node, a, constant, shape, dtype)
    if batched and wants_cpu_dot_bmm(ctx.target, dtype, shape, k):
        return cpu_dot_bmm(ctx, node, a, ctx.view_of_memory(b), shape, dtype)
    tf32 = ctx.precision.matmul_tf32
    if constant is None and ctx.target.kind == "cuda":
        on_tensor_cores = _tensor_core_bmm(ctx, node, a, b, right, shape, dtype, tf32=tf32)
        if on_tensor_cores is not None:
            return on_tensor_cores
    info = {}
    if packs:
        # a transposed right matrix known at run time (a training graph's W^T): read in place,
        # each vector along j is a gather across rows; packed into the panels a constant gets,
        # by a kernel of its own (a transpose in tiles, read along W's rows), the product runs
        # as on constant weights (PACK_MIN_ROWS)
        mr, nr = matmul_tiles(ctx.target, acc)
        packed = _packed_panels(ctx, ctx.view_of_memory(b), nr, node.name)
        info = {"mr": mr, "nr": nr, "panels": packed.source.name}
        b_at = lambda kk, j: packed.at((j // nr, kk, j % nr))  # noqa: E731
        reads = a.reads | packed.reads
    elif constant is not None and ctx.target.kind == "llvm":
        mr, nr = matmul_tiles(ctx.target, acc)
        if isinstance(n, int) and n <= 2:
            # a matrix-vector product: one or two rows of accumulators, so wider panels keep
            # 8 independent FMA chains in flight (two would wait on each other's latency)
            nr = ctx.target.vector_lanes(acc) * 8 // n
        packed = ctx.add_constant(pack_panels(constant, nr), f"{node.name}_packed")
        info = {"mr": mr, "nr": nr, "panels": packed.source.name}  # the schedule prefetches it
        b_at = lambda kk, j: packed.at((j // nr, kk, j % nr))  # noqa: E731
        reads = a.reads | packed.reads
    else:
        # a right matrix whose rows lie contiguous in memory (attention's V, a view of the qkv
        # projection) is read in place: its vector loads along j stay contiguous; a transposed
        # one (K^T) is copied, else each vector would be a gather
        b = ctx.view_of_memory(b) if rows_contiguous(right) else ctx.buffer(b)
        b_at = lambda kk, j, *bi: b.at((*bi, kk, j))  # noqa: E731
        reads = a.reads | b.reads
    if constant is not None and wants_tensor_cores(ctx.target, dtype, shape, k, True, tf32):
        return tensor_core_product(ctx, node, a, b, constant, shape, dtype)
    splits = cuda_matmul_splits(ctx.target, shape, k, dtype) if constant is not None else 0
    if splits:
        return matmul_split_k(ctx, node, a, constant, shape, dtype, splits)
    # NOTE: rows known only at run time: the CPU schedule's last row tile is peeled, and its
    # accumulators are a whole tile (12 rows); a read of row min(i, n - 1) keeps the rows past
    # n inside A (their sums are never stored), so that tile runs unguarded instead of testing
    # each row at each step of k, and a column-masked panel reads A unmasked (GPT-2 block seq
    # 128 under dynamic=True, 1 thread, min of 40: QK^T 212 -> 187-194 us, static 119;
    # attention x V 153 -> 134-146, static 122)
    last_row = n - 1 if not isinstance(n, int) and ctx.target.kind == "llvm" else None

    def body(*idx):
        *bi, i, j = idx
        row = i if last_row is None else te.min(i, last_row)
        product = in_dtype(a.at((*bi, row, r.var)), acc) * in_dtype(b_at(r.var, j, *bi), acc)
        return te.sum(product, axis=r)

    C = te.compute(shape, body, name=ctx.unique(f"mm_{node.name}"))
    info.update(shape=shape, stages=[C], k=k)
    anchor = Anchor("matmul", C, frozenset(reads), (node.name,), info)
    del lead, n, m
    return ctx.anchored(anchor, lambda ia: C[tuple(ia)], dtype)


# Rows under which a CPU product does not pack a transposed right matrix known at run time, but
# runs eagerly: the pass costs ~0.8 ns an element of it here, the product ~0.02 ns per row and
# element, so packing is under a tenth of the product from ~400 rows. 64 x 3072 @ (768 x 3072)^T,
# 1 thread, thread time (load ~5): eager 4.0 ms, packed 5.5 (the product 3.6 of it), in place
# (a gather per vector) 29.
PACK_MIN_ROWS = 384


def _packs_at_run_time(ctx, node, right, batched: bool, b) -> bool:
    """Whether a CPU product packs its right matrix `b` into panels as it runs: a 2-d one of
    static sizes, not a constant (those are packed once), whose rows are not contiguous in
    memory (a transpose: a training graph's W^T)."""
    if batched or ctx.target.kind != "llvm" or rows_contiguous(right):
        return False
    if not isinstance(b, Lazy) or ctx.constant(b) is not None or b.ndim != 2:
        return False
    k, m = b.shape
    n = ctx.shape_of(node)[0]
    return all(isinstance(v, int) for v in (k, m, n)) and k * m >= 4096


def _packed_panels(ctx, b: Lazy, nr: int, name: str) -> Lazy:
    """b [k, m] as [ceil(m / nr), k, nr] in a buffer of its own, zero-padded (pack_panels at
    run time)."""
    k, m = b.shape
    panels = -(-m // nr)

    def at(idx):
        p, kk, jj = idx
        j = p * nr + jj
        if m % nr == 0:
            return b.at((kk, j))
        return te.if_then_else(j < m, b.at((kk, te.min(j, m - 1))), te.const(0, b.dtype))

    lazy = Lazy((panels, k, nr), b.dtype, at, b.reads, b.nodes, b.cost + 1)
    return ctx.materialize(lazy, node=f"{name}_panels")


def _tensor_core_bmm(ctx, node, a: Lazy, b: Lazy, right, shape, dtype, out_dtype=None, tf32=False):
    """A product whose right matrix `b` (the fx value `right`) is computed in the graph, on
    tensor cores: its operands as they are where the sizes are whole mma steps and tiles, else
    zero-padded copies (then the right matrix's only copy); None where it stays on CUDA cores."""
    if wants_tensor_cores(ctx.target, dtype, shape, a.shape[-1], False, tf32):
        b = ctx.view_of_memory(b) if rows_contiguous(right) else ctx.buffer(b)
        return tensor_core_product(ctx, node, a, b, None, shape, dtype, out_dtype)
    padded = padded_operands(ctx, a, ctx.lazy(b), shape, dtype)
    if padded is None:
        return None
    return tensor_core_product(ctx, node, *padded, None, shape, dtype, out_dtype)


_CASTS = (aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _half_operands(ctx, node, dtypes):
    """The half values (of one of `dtypes`, both the same) whose float32 casts are both operands
    of this float32 product (the attention decompositions' Q K^T), or None: their product with
    half operands and float32 sums (half products are exact in float32) is the float32
    product's, on the CPU's dot kernel or a GPU's tensor cores."""
    values, kinds = [], set()
    for arg in node.args[:2]:
        if not isinstance(arg, torch.fx.Node) or arg.target not in _CASTS:
            return None
        source = arg.args[0]
        val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dtype not in dtypes:
            return None
        kinds.add(val.dtype)
        values.append(ctx.lazy(ctx.env[source]))
    return values if len(kinds) == 1 else None


@lowers(aten.mm.default)
def mm(ctx, node, a, b):
    return _matmul(ctx, node, a, b, batched=False)


@lowers(aten.bmm.default)
def bmm(ctx, node, a, b):
    return _matmul(ctx, node, a, b, batched=True)


@lowers(aten.addmm.default)
def addmm(ctx, node, bias, a, b, beta=1, alpha=1):
    if ctx.target.kind == "cuda" and alpha == 1 and beta == 1:  # the hand kernel adds the bias
        a = ctx.view_of_memory(a)  # (as _matmul reads it: materialized once either way)
        fused = ws_addmm(ctx, node, bias, a, ctx.constant(b))
        if fused is not None:
            return fused
    product = _matmul(ctx, node, a, b, batched=False, right=node.args[2])
    fn = lambda c, d: c * alpha + d * beta if (alpha != 1 or beta != 1) else c + d  # noqa: E731
    return ctx.pointwise(fn, [product, ctx.lazy(bias)])


@lowers(aten.embedding.default)
def embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    w = ctx.buffer(weight)
    ind = ctx.no_anchor(indices)
    shape = ctx.shape_of(node)
    rows = w.shape[0]

    def at(idx):
        row = ind.at(tuple(idx[:-1])).astype("int32")
        return w.at((te.max(te.min(row, rows - 1), 0), idx[-1]))

    return Lazy(shape, w.dtype, at, w.reads | ind.reads, ind.nodes + (node.name,), ind.cost + 2)
