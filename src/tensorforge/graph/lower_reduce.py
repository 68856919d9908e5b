"""Reductions and the operators built around one: sum/mean/amax/amin/var, softmax, log_softmax,
layer and group norm (the pools, reductions over windows: lower_pools.py; inference batch norm:
lower_batch_norm.py).

Each makes an `Anchor`: its reduction stages as te computes reading the (element-wise) input,
which is inlined into them (the prologue); what the consumers compute from the result is the
epilogue, in the same kernel. Half-precision inputs are reduced in float32 (eager torch's
accumulation type) and the results rounded once, where they are stored.
"""

from __future__ import annotations

import dataclasses
import operator

import torch

from tensorforge import te
from tensorforge.graph.lower_split_rows import (
    row_chunks,
    split_moments,
    split_reduction,
    split_softmax,
)
from tensorforge.graph.lower_views import reads_across_rows
from tensorforge.graph.registry import lowers
from tensorforge.graph.values import (
    Anchor,
    Lazy,
    Unsupported,
    in_dtype,
    numel,
    opmath_dtype,
)

aten = torch.ops.aten


def _reads(*values) -> frozenset:
    return frozenset().union(*[v.reads for v in values if isinstance(v, Lazy)])


def _float_size(n, dtype: str):
    return te.const(float(n), dtype) if isinstance(n, int) else n.astype(dtype)


def later_outputs_read(node) -> bool:
    """Whether a result of `node` past its first (a statistic: mean, rstd, indices) is read."""
    for user in node.users:
        if user.target is operator.getitem and not user.users:
            continue  # a statistic nobody reads
        if user.target is not operator.getitem or user.args[1] != 0:
            return True
    return False


def only_first_output_used(node) -> None:
    if later_outputs_read(node):
        raise Unsupported("a statistic output (mean, rstd, indices) is used")


def _element_of(x: Lazy):
    return lambda idx: x.at(())


def reduction(
    ctx, node, x, dims, keepdim, combine, dtype, prologue=None, name="red", out_shape=None
):
    """The anchor of reducing `x` over `dims` (all when empty) with `combine` (te.sum, te.max),
    computed in `dtype`'s opmath dtype (float32 for a half type); of the node's shape unless
    `out_shape` says it."""
    dtype = opmath_dtype(dtype)
    x = ctx.no_anchor(x)
    if x.ndim == 0:  # a 0-d tensor reduced over its dim 0 or -1: its one element as a vector
        x, dims = dataclasses.replace(x, shape=(1,), at=_element_of(x), source=None), [0]
    ndim = x.ndim
    dims = sorted({d % ndim for d in dims}) if dims else list(range(ndim))
    if out_shape is None and not isinstance(node.meta["val"], tuple):
        out_shape = ctx.shape_of(node)
    if out_shape is None:
        out_shape = ctx.shape_of(node, 0)
    fused = _fused_trailing_dims(ctx, x, dims)
    kept = dims[: len(dims) - len(fused)]
    axes = [te.reduce_axis((0, x.shape[d]), name=f"r{d}") for d in kept]
    if fused:
        axes.append(te.reduce_axis((0, numel([x.shape[d] for d in fused])), name=f"r{fused[0]}"))

    def reduced_index(d):
        if d in kept:
            return axes[kept.index(d)].var
        inner = numel([x.shape[e] for e in fused if e > d])  # (1 for the last)
        r = axes[-1].var
        return (r // inner if inner != 1 else r) % x.shape[d] if d != fused[0] else r // inner

    def full(i):
        index, k = [], 0
        for d in range(ndim):
            if d in dims:
                index.append(reduced_index(d))
                k += 1 if keepdim else 0
            else:
                index.append(i[k])
                k += 1
        return tuple(index)

    def body(*i):
        v = in_dtype(x.at(full(i)), dtype)
        return combine(prologue(v, i) if prologue else v, axis=axes)

    stage = te.compute(out_shape, body, name=ctx.unique(f"{name}_{node.name}"))
    count = numel([x.shape[d] for d in dims])
    return x, stage, out_shape, full, axes, count


# NOTE: a CPU reduction over trailing dims shorter than this (batch norm's sums over H, W of
# 14 x 14) reduces them as one axis: the vectors then run along all H W elements of a channel,
# where one axis of 14 is too short for a vector and ran scalar (1 x 256 x 14 x 14, sums of
# ReLU-masked gradients, 1 thread: 0.57 ms against eager's 0.11)
FUSE_DIMS_SHORTER_THAN = 64


def _fused_trailing_dims(ctx, x, dims) -> list[int]:
    """The trailing run of reduced dims (through the last) that the reduction reads as one
    axis: on the CPU, of static sizes, where the last is short; [] otherwise."""
    if ctx.target.kind != "llvm" or not dims or dims[-1] != x.ndim - 1:
        return []
    run = [dims[-1]]
    while len(run) < len(dims) and dims[-len(run) - 1] == run[0] - 1:
        run.insert(0, run[0] - 1)
    sizes = [x.shape[d] for d in run]
    if len(run) < 2 or not all(isinstance(n, int) and n > 0 for n in sizes):
        return []
    return run if sizes[-1] < FUSE_DIMS_SHORTER_THAN else []


def reduction_anchor(ctx, kind, stages, reads, shape, nodes, **info):
    return Anchor(
        kind, stages[-1], frozenset(reads), tuple(nodes), {"shape": shape, "stages": stages, **info}
    )


@lowers(aten.sum.dim_IntList, aten.sum.default, aten.amax.default, aten.amin.default)
def sum_(ctx, node, x, dims=None, keepdim=False, dtype=None):
    out_dtype = ctx.dtype_of(node)
    combine = {
        aten.sum.dim_IntList: te.sum,
        aten.sum.default: te.sum,
        aten.amax.default: te.max,
        aten.amin.default: te.min,
    }[node.target]
    if node.target is aten.sum.default:
        dims, keepdim = None, False
    x = ctx.no_anchor(x)
    split = split_reduction(ctx, node, x, dims, keepdim, combine, out_dtype)
    if split is not None:  # few long rows on CUDA
        return split
    x, stage, shape, *_ = reduction(ctx, node, x, dims, keepdim, combine, out_dtype)
    anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, shape, x.nodes + (node.name,))
    return ctx.anchored(anchor, lambda ia: stage[tuple(ia)], out_dtype)


@lowers(aten.mean.dim, aten.mean.default)
def mean(ctx, node, x, dims=None, keepdim=False, dtype=None):
    out_dtype = ctx.dtype_of(node)
    x = ctx.no_anchor(x)
    count = numel([x.shape[d] for d in dims] if dims and x.ndim else x.shape)  # (0-d: 1)
    if isinstance(count, int):  # few long rows on CUDA
        split = split_reduction(ctx, node, x, dims, keepdim, te.sum, out_dtype, 1.0 / count)
        if split is not None:
            return split
    x, stage, shape, _, _, count = reduction(ctx, node, x, dims, keepdim, te.sum, out_dtype)
    anchor = reduction_anchor(ctx, "reduce", [stage], x.reads, shape, x.nodes + (node.name,))
    inv = 1.0 / count if isinstance(count, int) else None
    if inv is not None:
        return ctx.anchored(anchor, lambda ia: stage[tuple(ia)] * inv, out_dtype)
    return ctx.anchored(
        anchor, lambda ia: stage[tuple(ia)] / _float_size(count, stage.dtype), out_dtype
    )


def _variance(ctx, node, x, dims, correction, keepdim):
    dtype = ctx.dtype_of(node, 0) if isinstance(node.meta["val"], tuple) else ctx.dtype_of(node)
    x, total, shape, full, axes, count = reduction(ctx, node, x, dims, keepdim, te.sum, dtype)
    acc = total.dtype
    n = _float_size(count, acc)
    squares = te.compute(
        shape,
        lambda *i: te.sum(_sq(in_dtype(x.at(full(i)), acc) - total[i] / n), axis=axes),
        name=ctx.unique(f"sq_{node.name}"),
    )
    correction = 1 if correction is None else correction
    anchor = reduction_anchor(
        ctx, "reduce", [total, squares], x.reads, shape, x.nodes + (node.name,)
    )
    var = lambda ia: squares[tuple(ia)] / (n - float(correction))  # noqa: E731
    mean = lambda ia: total[tuple(ia)] / n  # noqa: E731
    return anchor, var, mean, dtype


def _sq(v):
    return v * v


@lowers(aten.var.correction, aten.var.dim)
def var(ctx, node, x, dims=None, unbiased=None, keepdim=False, correction=None):
    if node.target is aten.var.dim:
        correction = 1 if unbiased in (None, True) else 0
    anchor, v, _, dtype = _variance(ctx, node, x, dims, correction, keepdim)
    return ctx.anchored(anchor, v, dtype)


@lowers(aten.var_mean.correction)
def var_mean(ctx, node, x, dims=None, correction=None, keepdim=False):
    anchor, v, m, dtype = _variance(ctx, node, x, dims, correction, keepdim)
    return ctx.anchored(anchor, v, dtype), ctx.anchored(anchor, m, dtype)


def _rows_along(x: Lazy, dim: int):
    """`x` (no anchor) seen with `dim` last, so that a row operator's rows run along it, and
    how to put its result back: a function of that result (a Lazy of the moved shape) giving
    the result in x's own order (the moved result is stored first, in its order, then read
    through the inverse permutation; None for the last dimension: nothing moves)."""
    if x.ndim == 0:  # (torch allows dim 0 or -1: a row of one element)
        raise Unsupported("a row operator of a 0-d tensor")
    dim %= x.ndim
    if dim == x.ndim - 1:
        return x, None
    order = [d for d in range(x.ndim) if d != dim] + [dim]  # moved position -> x's dimension

    def to_x(moved):  # an index of the moved shape -> x's
        idx = [None] * x.ndim
        for position, d in enumerate(order):
            idx[d] = moved[position]
        return tuple(idx)

    def from_x(idx):  # x's index -> the moved shape's
        return tuple(idx[d] for d in order)

    shape = tuple(x.shape[d] for d in order)
    moved = dataclasses.replace(x, shape=shape, at=lambda ia: x.at(to_x(ia)), source=None)

    def back(ctx, value: Lazy) -> Lazy:
        stored = ctx.no_anchor(value)
        return dataclasses.replace(
            stored, shape=x.shape, at=lambda idx: stored.at(from_x(idx)), source=None
        )

    return moved, back


@lowers(aten._softmax.default, aten.softmax.int)
def softmax(ctx, node, x, dim, half_to_float=False, dtype=None):
    return _softmax(ctx, node, x, dim, safe=False)


@lowers(aten._safe_softmax.default)
def safe_softmax(ctx, node, x, dim, dtype=None):
    """SDPA's softmax: a row that is all -inf (masked out entirely) gives zeros, not NaN."""
    return _softmax(ctx, node, x, dim, safe=True)


def _softmax(ctx, node, x, dim, safe: bool):
    x, back = _rows_along(ctx.no_anchor(x), dim)
    out = ctx.dtype_of(node)
    acc = opmath_dtype(out)
    rows, m = x.shape[:-1], x.shape[-1]
    xv = lambda i: in_dtype(x.at(tuple(i)), acc)  # noqa: E731
    chunks = row_chunks(ctx.target, rows, m, acc)
    if chunks is not None:  # few long rows on CUDA
        mx, sm, stats = split_softmax(ctx, node, xv, x.reads, rows, chunks, acc)
        stages, info = [mx, sm], {"row_block": chunks.row_block}
        e = lambda ia: te.exp(xv(ia) - mx[tuple(ia[:-1])])  # noqa: E731
    else:
        k1 = te.reduce_axis((0, m), name="k1")
        k2 = te.reduce_axis((0, m), name="k2")
        mx = te.compute(
            rows, lambda *i: te.max(xv(i + (k1.var,)), axis=k1), name=ctx.unique("row_max")
        )
        exps = te.compute(x.shape, lambda *i: te.exp(xv(i) - mx[i[:-1]]), name=ctx.unique("exp"))
        sm = te.compute(
            rows, lambda *i: te.sum(exps[i + (k2.var,)], axis=k2), name=ctx.unique("row_sum")
        )
        stages, info, stats = [mx, exps, sm], {}, frozenset()
        e = lambda ia: exps[tuple(ia)]  # noqa: E731
    reads, nodes = x.reads | stats, x.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "softmax", stages, reads, x.shape, nodes, **info)

    def at(ia):
        v = e(ia) * (1.0 / sm[tuple(ia[:-1])])
        if not safe:
            return v
        masked = mx[tuple(ia[:-1])] == te.const(float("-inf"), acc)  # the row's max is -inf
        return te.if_then_else(masked, te.const(0.0, acc), v)

    value = ctx.anchored(anchor, at, out)
    return value if back is None else back(ctx, value)


@lowers(aten._log_softmax.default, aten.log_softmax.int)
def log_softmax(ctx, node, x, dim, half_to_float=False, dtype=None):
    x, back = _rows_along(ctx.no_anchor(x), dim)
    out = ctx.dtype_of(node)
    rows, m = x.shape[:-1], x.shape[-1]
    acc = opmath_dtype(out)
    xv = lambda i: in_dtype(x.at(tuple(i)), acc)  # noqa: E731
    chunks = row_chunks(ctx.target, rows, m, acc)
    if chunks is not None:  # few long rows on CUDA
        mx, sm, stats = split_softmax(ctx, node, xv, x.reads, rows, chunks, acc)
        info = {"row_block": chunks.row_block}
    else:
        k1 = te.reduce_axis((0, m), name="k1")
        k2 = te.reduce_axis((0, m), name="k2")
        mx = te.compute(
            rows, lambda *i: te.max(xv(i + (k1.var,)), axis=k1), name=ctx.unique("row_max")
        )
        sm = te.compute(
            rows,
            lambda *i: te.sum(te.exp(xv(i + (k2.var,)) - mx[i]), axis=k2),
            name=ctx.unique("row_sum"),
        )
        info, stats = {}, frozenset()
    reads, nodes = x.reads | stats, x.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "softmax", [mx, sm], reads, x.shape, nodes, **info)
    value = ctx.anchored(
        anchor, lambda ia: xv(ia) - mx[tuple(ia[:-1])] - te.log(sm[tuple(ia[:-1])]), out
    )
    return value if back is None else back(ctx, value)


def _row_moments(ctx, node, x, xv, rows, m: int, n, prefix: str):
    """Each row's sum, and its sum of squared deviations from the mean (a second pass, as torch
    computes the variance), of the `m` values `xv(row + (k,))` (reading x); `n`: m as a float.
    Also the buffers they read besides x's and the anchor's schedule facts: on CUDA, few long
    rows are split in chunks (lower_split_rows)."""
    chunks = row_chunks(ctx.target, rows, m, n.dtype)
    if chunks is not None:
        total, squares, reads = split_moments(ctx, node, xv, x.reads, rows, chunks, n, n.dtype)
        return total, squares, reads, {"row_block": chunks.row_block}
    k1 = te.reduce_axis((0, m), name="k1")
    k2 = te.reduce_axis((0, m), name="k2")
    total = te.compute(
        rows, lambda *i: te.sum(xv(i + (k1.var,)), axis=k1), name=ctx.unique(f"{prefix}_sum")
    )
    squares = te.compute(
        rows,
        lambda *i: te.sum(_sq(xv(i + (k2.var,)) - total[i] / n), axis=k2),
        name=ctx.unique(f"{prefix}_sq"),
    )
    return total, squares, frozenset(), {}


def _normalized(value, total, squares, row: tuple, n, eps):
    """`value` of `row` less the row's mean, over its standard deviation (+ eps)."""
    return (value - total[row] / n) * te.rsqrt(squares[row] / n + float(eps))


LN_COPY_STRIDED = True


@lowers(aten.native_layer_norm.default)
def layer_norm(ctx, node, x, normalized_shape, weight, bias, eps):
    """Rows of the trailing `normalized_shape` dimensions; over several, the anchor's rows are
    them flattened (as group norm's), read back at the index each row element lands on."""
    only_first_output_used(node)
    x = ctx.no_anchor(x)
    if LN_COPY_STRIDED and reads_across_rows(x):
        x = ctx.materialize(x)  # (rows read in place: a permuted view's, a channel apart)
    out = ctx.dtype_of(node, 0)
    acc = opmath_dtype(out)
    k = len(normalized_shape)
    rows, trailing = x.shape[: x.ndim - k], x.shape[x.ndim - k :]
    m = numel(trailing)
    n = _float_size(m, acc)

    def logical(ia):  # (*row, row element) -> x's index
        return (*ia[:-1], *_unflatten(ia[-1], trailing))

    xv = lambda ia: in_dtype(x.at(logical(tuple(ia))), acc)  # noqa: E731
    total, squares, stats, info = _row_moments(ctx, node, x, xv, rows, m, n, "ln")
    w = ctx.lazy(weight) if weight is not None else None
    b = ctx.lazy(bias) if bias is not None else None
    w = ctx.no_anchor(w) if w is not None else None
    b = ctx.no_anchor(b) if b is not None else None

    def at(ia):
        v = _normalized(xv(ia), total, squares, tuple(ia[:-1]), n, eps)
        element = _unflatten(ia[-1], trailing)
        if w is not None:
            v = v * in_dtype(w.at(element), acc)
        if b is not None:
            v = v + in_dtype(b.at(element), acc)
        return v

    reads = _reads(x, w, b) | stats
    nodes = x.nodes + (node.name,)
    shape = (*rows, m)
    anchor = reduction_anchor(ctx, "layer_norm", [total, squares], reads, shape, nodes, **info)
    if k == 1:
        return ctx.anchored(anchor, at, out), None, None
    return ctx.anchored(anchor, at, out, shape=x.shape, to_logical=logical), None, None


def _unflatten(j, sizes) -> tuple:
    """The index into `sizes` of row-major position j."""
    index = []
    for size in reversed(sizes[1:]):
        index.append(j % size)
        j = j // size
    return (j, *reversed(index))


@lowers(aten.native_group_norm.default)
def group_norm(ctx, node, x, weight, bias, N, C, HxW, group, eps):
    """Layer norm over the rows of x viewed as [N, groups, C / groups * H * W] (a group's
    channels and positions are contiguous): one kernel, a row per task, the same row schedule;
    consumers read it back at the NCHW index the row element lands on."""
    only_first_output_used(node)
    x = ctx.no_anchor(x)
    if x.cost > 4:  # NOTE: the three passes recompute it: a gather or concatenation is stored once
        x = ctx.materialize(x)
    out = ctx.dtype_of(node, 0)
    acc = opmath_dtype(out)
    dims = tuple(x.shape[1:])
    if not isinstance(dims[0], int) or dims[0] % group:  # (positions may be run-time sizes)
        raise Unsupported("group norm channels that are not static")
    per_group, spatial = dims[0] // group, dims[1:]
    positions = numel(spatial)
    m = per_group * positions
    n = _float_size(m, acc)

    def logical(ia):  # (sample, group, row element) -> (sample, channel, *position)
        sample, g, j = ia
        index, rest = [], j % positions
        for size in reversed(spatial):
            index.append(rest % size)
            rest = rest // size
        return (sample, g * per_group + j // positions, *reversed(index))

    xv = lambda ia: in_dtype(x.at(logical(ia)), acc)  # noqa: E731
    rows = (x.shape[0], group)
    total, squares, stats, info = _row_moments(ctx, node, x, xv, rows, m, n, "gn")
    w = ctx.no_anchor(ctx.lazy(weight)) if weight is not None else None
    b = ctx.no_anchor(ctx.lazy(bias)) if bias is not None else None

    def at_anchor(ia):
        v = _normalized(xv(ia), total, squares, tuple(ia[:-1]), n, eps)
        channel = (ia[1] * per_group + ia[2] // positions,)
        if w is not None:
            v = v * in_dtype(w.at(channel), acc)
        if b is not None:
            v = v + in_dtype(b.at(channel), acc)
        return v

    shape = (*rows, m)
    reads = _reads(x, w, b) | stats
    nodes = x.nodes + (node.name,)
    anchor = reduction_anchor(ctx, "layer_norm", [total, squares], reads, shape, nodes, **info)
    value = ctx.anchored(anchor, at_anchor, out, shape=x.shape, to_logical=logical)
    return value, None, None
