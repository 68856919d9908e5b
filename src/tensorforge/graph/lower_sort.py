"""Sorts as ir_builder kernels writing values and indices together: sort (stable or not,
descending, any dimension; argsort and msort are sorts), topk, kthvalue, median and nanmedian
(of a dimension, and of the whole tensor) and mode.

Each line along the dimension is one task (CPU: lines in parallel; CUDA: a thread a line, of
at most CUDA_LINE elements, its scratch in local memory; sort and topk of longer lines, up to
BLOCK_SORT_LINE, a block a line: block_sort.py), running sort_lines.py's programs:
sort sorts the line (stable: torch's stable order, which a sort that need not be stable gives
too); topk up to SELECT_K selects in one pass, past it gathers candidates under a threshold,
keeps k by quickselect and sorts those; kthvalue, median and nanmedian quickselect (a
median's line with a NaN gives its first NaN, as torch's; a nanmedian's, the median of the
rest, of a line of NaNs one of them); mode counts the sorted line's runs of equal values.
Among equal values, topk, kthvalue, median and mode may take another index than torch
(unspecified there; theirs point at equal values).
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.block_sort import block_sort_program
from tensorforge.graph.extern_kernels import Lines, each, extern_kernel_outputs, numel, wide
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.sort_lines import (
    Line,
    gather_select_line,
    key_dtype,
    local,
    order,
    select_kth,
    select_line,
    sort_line,
)
from tensorforge.graph.values import Lazy, Unsupported, is_one
from tensorforge.te import dtype as dt

aten = torch.ops.aten

SELECT_K = 16  # topk up to this k keeps the k best in one pass; larger k sort
# longest line a CUDA thread sorts (its scratch in local memory). A thread a line lost to eager
# at 256 (H200: sort of 4096 x 256 0.72 ms against 0.11, topk 5 0.25 against 0.06, median 0.87
# against 0.04), so longer lines run eagerly; short ones (not measured) stay kernels, which keeps
# the graph's CUDA graph (an eager step breaks it). A block a line sorting in shared memory is
# what would win there.
CUDA_LINE = 64
# longest line a CUDA block sorts in shared memory (block_sort.py: sort and topk of lines past
# CUDA_LINE; a bitonic network, a thread per pair); 0: none, those run eagerly. Compiled with
# nvcc, not yet timed on a GPU (tests/graph/test_lower_sort.py -m cuda checks it against eager
# with 2048): set it to 2048 or 4096 where a GPU run shows it beating eager.
BLOCK_SORT_LINE = 0

# -- the operators -------------------------------------------------------------------------

# On the CPU, 1 thread (Zen 4), float32 (benchmarks/sorts.py, eager ms against the kernels'):
# sort of 64 x 4096 15.5 against 9.9, of 4096 x 50 5.4 against 3.7, of 4096 x 16 0.91 against
# 0.92; topk 5 of 64 x 4096 0.33 against 0.29, 16 of 16 x 65536 1.27 against 1.03; median of
# 64 x 4096 4.1 against 3.3, of 4096 x 16 1.07 against 1.10, of a whole 1024 x 1024 9.7
# against 11.6 (one line: one thread either way; eager's nth_element partitions faster).
# topk past SELECT_K (gather_select_line; load ~2): 100 of 64 x 4096 2.36 against 1.34, 256
# of it 2.95 against 2.32, 32 of 16 x 65536 1.43 against 0.47, 64 of 256 x 1024 2.80 against
# 2.15, 20 of 1024 x 320 3.46 against 2.87; but 500 of 64 x 4096 3.69 against 3.70, 32 of
# 1024 x 256 3.31 against 3.67, 17 of 2048 x 64 2.01 against 2.45 (k past a 16th of the
# line: most of the line enters and the final sort of k dominates). Those that lose stay
# eager there: topk past SELECT_K with k past TOPK_SHARE of the line (or a run-time line),
# the whole tensor's median, lines of at most SHORT_LINE. nanmedian (a tenth NaN, load ~4):
# of 64 x 4096 3.99 against 3.80, of 4096 x 50 3.47 against 3.57 (even), of 4096 x 16 1.20
# against 1.29, of a whole 1024 x 1024 15.5 against 11.4 (eager's is slower than its median).
TOPK_SHARE = 1 / 16
SHORT_LINE = 16


def _short_lines(node) -> bool:
    """Are the node's lines static and at most SHORT_LINE long?"""
    m = _line_extent(node)
    return isinstance(m, int) and m <= SHORT_LINE


def _line_extent(node):
    """The extent of the node's lines (an int, or a symbol where it is a run-time size)."""
    shape = tuple(node.args[0].meta["val"].shape)
    position = DIM_POSITION[node.target]
    dim = node.args[position] if position and len(node.args) > position else None
    dim = node.kwargs.get("dim", -1) if dim is None else dim
    return shape[dim % len(shape)] if shape else 1


DIM_POSITION = {  # where the dimension is among the positional arguments (sort.stable: none)
    aten.sort.default: 1,
    aten.sort.stable: None,
    aten.topk.default: 2,
    aten.kthvalue.default: 2,
    aten.median.dim: 1,
    aten.nanmedian.dim: 1,
}


def _large_k(node) -> bool:
    """topk of k past SELECT_K and past TOPK_SHARE of the line (or a run-time line), or of
    short lines."""
    k = node.args[1]
    if _short_lines(node):
        return True
    if k <= SELECT_K:
        return False
    m = _line_extent(node)
    return not (isinstance(m, int) and k <= TOPK_SHARE * m)


eager_on_cpu(aten.median.default)
eager_on_cpu(
    aten.topk.default,
    when=_large_k,
    what=f"of k past {SELECT_K} and a 16th of the line, or of short lines",
)
eager_on_cpu(
    aten.sort.default,
    aten.sort.stable,
    aten.kthvalue.default,
    aten.median.dim,
    aten.nanmedian.dim,
    when=_short_lines,
    what=f"of lines of at most {SHORT_LINE}",
)


def _block_sorts(ctx, lines: Lines) -> bool:
    """Does a CUDA block sort these lines (past CUDA_LINE, up to BLOCK_SORT_LINE)?"""
    m = lines.extent
    return ctx.target.kind == "cuda" and isinstance(m, int) and CUDA_LINE < m <= BLOCK_SORT_LINE


def _lines_of(ctx, x: Lazy, dim: int, what: str) -> tuple[Lazy, Lines, int]:
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        raise Unsupported(f"{what} of a 0-d tensor")
    if any(isinstance(s, int) and s == 0 for s in x.shape):
        raise Unsupported(f"{what} of an empty tensor")
    if x.dtype not in _ORDERED:
        raise Unsupported(f"{what} of {x.dtype}")
    d = dim % x.ndim
    lines = Lines(x.shape, d)
    short = isinstance(lines.extent, int) and lines.extent <= CUDA_LINE
    if (
        ctx.target.kind == "cuda"
        and not short
        and not (what in ("sort", "topk") and _block_sorts(ctx, lines))
    ):
        raise Unsupported(f"{what} of lines longer than {CUDA_LINE} on a GPU")
    return x, lines, d


_ORDERED = (
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool"
)  # fmt: skip


def _position_dtype(m) -> str:
    return "int32" if isinstance(m, int) and m < 2**31 else "int64"


def _kernel(ctx, node, x: Lazy, lines: Lines, shape: tuple, per_line, view=None):
    """(values, indices) in buffers of `shape`: `per_line(ib, line, outs)` for each line of x."""
    cuda = ctx.target.kind == "cuda"
    key = key_dtype(x.dtype)

    def program(ib, ins, outs):
        with each(ib, lines.count, cuda, "r", parallel=not is_one(lines.count)) as r:
            per_line(ib, Line(ib, ins[0], lines, r, key), outs)

    return extern_kernel_outputs(ctx, node, [x], shape, (x.dtype, "int64"), program, view)


@lowers(aten.sort.default, aten.sort.stable)
def sort(ctx, node, x, *args, stable=False, dim=-1, descending=False):
    if node.target is aten.sort.default:  # (self, dim=-1, descending=False)
        dim = args[0] if len(args) > 0 else dim
        descending = args[1] if len(args) > 1 else descending
    x, lines, d = _lines_of(ctx, x, dim, "sort")
    if _block_sorts(ctx, lines):
        program = block_sort_program(lines, x.dtype, bool(descending), lines.extent)
        return extern_kernel_outputs(ctx, node, [x], x.shape, (x.dtype, "int64"), program)
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        line.write_sorted(outs, sort_line(ib, line, bool(descending), position), line.m)

    return _kernel(ctx, node, x, lines, x.shape, per_line)


@lowers(aten.topk.default)
def topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    x, lines, d = _lines_of(ctx, x, dim, "topk")
    if not isinstance(k, int):
        raise Unsupported("topk of a run-time k")
    m = lines.extent
    if k == 0 or (isinstance(m, int) and k > m):
        raise Unsupported(f"topk of k = {k} in lines of {m}")  # (eager's error, or nothing)
    if _block_sorts(ctx, lines):
        program = block_sort_program(lines, x.dtype, bool(largest), k)
        return extern_kernel_outputs(ctx, node, [x], _along(x, d, k), (x.dtype, "int64"), program)
    before = order(bool(largest), dt.is_float(x.dtype))
    position = _position_dtype(m)

    def per_line(ib, line, outs):
        if k <= SELECT_K:
            best, positions = select_line(ib, line, k, before, position)
        else:
            best, positions = gather_select_line(ib, line, k, before, position)
        with ib.for_range(0, k, name="t") as t:
            line.write(outs, t, best[t], positions[t], k)

    return _kernel(ctx, node, x, lines, _along(x, d, k), per_line)


@lowers(aten.mode.default)
def mode(ctx, node, x, dim=-1, keepdim=False):
    """The most frequent value of each line (the smallest of those as frequent) and its last
    position: the line sorted, then its runs of equal values counted (NaNs each their own;
    torch's order of NaNs is unspecified there)."""
    x, lines, d = _lines_of(ctx, x, dim, "mode")
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        sorted_ = sort_line(ib, line, False, position)
        keys, positions = sorted_.keys, sorted_.positions
        best_count, best_end = (
            local(ib, "int64", 0, "best_count"),
            local(ib, "int64", 0, "best_end"),
        )
        run = local(ib, "int64", 0, "run")
        with ib.for_range(0, wide(line.m), name="t") as t:
            same = (t > 0) & (keys[t] == keys[t - 1])  # (keys[-1]: the scratch's padding)
            run[0] = te.if_then_else(same, run[0] + 1, te.const(1, "int64"))
            with ib.if_scope(run[0] > best_count[0]):  # (an equal count later: a larger value)
                best_count[0], best_end[0] = run[0], t
        # (a run's positions rise, the sort being stable: its end holds the last of them)
        end = ib.let("end", best_end[0])
        line.write(outs, 0, keys[end], positions[end], 1)

    return _kernel(ctx, node, x, lines, _along(x, d, 1), per_line, _kept(x, d, keepdim))


@lowers(aten.kthvalue.default)
def kthvalue(ctx, node, x, k, dim=-1, keepdim=False):
    x, lines, d = _lines_of(ctx, x, dim, "kthvalue")
    m = lines.extent
    if not isinstance(k, int) or not (isinstance(m, int) and 1 <= k <= m):
        raise Unsupported(f"kthvalue of k = {k} in lines of {m}")  # (eager raises)
    return _kth(ctx, node, x, lines, _along(x, d, 1), k - 1, False, _kept(x, d, keepdim))


@lowers(aten.median.dim)
def median_dim(ctx, node, x, dim, keepdim=False):
    x, lines, d = _lines_of(ctx, x, dim, "median")
    kth = (wide(lines.extent) - 1) // 2
    return _kth(ctx, node, x, lines, _along(x, d, 1), kth, True, _kept(x, d, keepdim))


def _along(x: Lazy, d: int, extent) -> tuple:
    return (*x.shape[:d], extent, *x.shape[d + 1 :])


def _kept(x: Lazy, d: int, keepdim: bool) -> tuple | None:
    """The shape a reduced dimension's results are read in (None: as written, of extent 1)."""
    return None if keepdim else (*x.shape[:d], *x.shape[d + 1 :])


@lowers(aten.nanmedian.dim)
def nanmedian_dim(ctx, node, x, dim, keepdim=False):
    x, lines, d = _lines_of(ctx, x, dim, "nanmedian")
    return _kth(ctx, node, x, lines, _along(x, d, 1), None, "nan", _kept(x, d, keepdim))


@lowers(aten.median.default)
def median(ctx, node, x):
    """The whole tensor's median: its buffer (contiguous) read as one line."""
    return _whole_median(ctx, node, x, "median")


@lowers(aten.nanmedian.default)
def nanmedian(ctx, node, x):
    """The whole tensor's median of its elements that are not NaN (of all NaNs: NaN)."""
    return _whole_median(ctx, node, x, "nanmedian")


def _whole_median(ctx, node, x, what: str):
    x = ctx.no_anchor(x)
    if x.ndim == 0:
        raise Unsupported(f"{what} of a 0-d tensor")
    whole, _, _ = _lines_of(ctx, x, 0, what)
    lines = Lines((numel(whole.shape),), 0)
    if ctx.target.kind == "cuda" and not (
        isinstance(lines.extent, int) and lines.extent <= CUDA_LINE
    ):
        raise Unsupported(f"{what} of more than {CUDA_LINE} elements on a GPU")
    if what == "nanmedian":
        values, _ = _kth(ctx, node, whole, lines, (1,), None, "nan", view=())
    else:
        kth = (wide(lines.extent) - 1) // 2
        values, _ = _kth(ctx, node, whole, lines, (1,), kth, median=True, view=())
    return values


def _kth(ctx, node, x, lines: Lines, shape: tuple, kth, median, view=None):
    """(values, indices) of the line's kth element (0-based) in ascending order; a median's
    (median=True) line with a NaN gives its first NaN; a nanmedian's (median="nan", kth None)
    kth is the middle of its elements that are not NaN (a line of NaNs: one of them)."""
    position = _position_dtype(lines.extent)

    def per_line(ib, line, outs):
        if median == "nan":  # (count 0: the line's first NaN, at 0)
            keys, positions, count = select_kth(ib, line, lambda n: (n - 1) // 2, position)
            place = te.max(count - 1, 0) // 2
        else:
            keys, positions, count = select_kth(ib, line, kth, position)
            # a median's line with a NaN: its first NaN (the first past the ordered elements)
            place = te.if_then_else(count < wide(line.m), count, kth) if median else kth
        place = ib.let("place", place)
        line.write(outs, 0, keys[place], positions[place], 1)

    return _kernel(ctx, node, x, lines, shape, per_line, view)
