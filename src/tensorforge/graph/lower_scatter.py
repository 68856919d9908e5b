"""Scatters as ir_builder kernels: scatter (a source or a value; reduce add / multiply),
scatter_add, scatter_reduce.two (sum, prod, mean, amax, amin; include_self or not) and index_put
(accumulating or not; index_add and index_copy decompose into it).

Each kernel copies its input to the output, then walks the source. Sources are cut in fibers:
the positions that differ only along the scattered axis (scatter's `dim`, index_put's indexed
dimensions) land in output positions that differ only there, so one task (a CPU chunk of
fibers, a CUDA thread) takes its fibers' source positions in order, alone. No two tasks write
one element: sums need no atomics, every result is deterministic, and duplicate indices take
eager's order (the last write wins where nothing accumulates). An index outside its dimension
(eager raises) writes nothing; negative indices count from the end where torch allows them
(index_put), and write nothing where it raises (scatter). A mean counts each position's
updates: on the CPU in the task's own counts on its stack (the axis's extent times the task's
fibers, at most LOCAL_COUNTS: tasks of fewer fibers along a long axis), then divides there;
else in the whole output's counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tensorforge import te, tir
from tensorforge.graph.extern_kernels import (
    CHUNK,
    copy,
    each,
    extern_kernel,
    numel,
    vector_loop,
    wide,
)
from tensorforge.graph.registry import eager_on_cpu, lowers
from tensorforge.graph.values import (
    Lazy,
    Unsupported,
    broadcast_index,
    is_one,
    opmath_dtype,
    same_shape,
    same_size,
)
from tensorforge.te import dtype as dt

aten = torch.ops.aten

Combine = Callable[[te.Expr, te.Expr], te.Expr]
FEW_FIBERS = 8192  # fewer fibers than this leave a GPU idle: a thread per source element
ATOMIC_ADD_TYPES = ("float32", "float64", "int32")  # CUDA's atomicAdd


def _max(a, b):  # a NaN on either side wins, as eager's
    return te.if_then_else((b > a) | (b != b), b, a) if dt.is_float(a.dtype) else te.max(a, b)


def _min(a, b):
    return te.if_then_else((b < a) | (b != b), b, a) if dt.is_float(a.dtype) else te.min(a, b)


REDUCTIONS: dict[str, tuple[Combine, Callable[[str], te.Expr]]] = {
    "sum": (lambda a, b: a + b, lambda d: te.const(0, d)),
    "add": (lambda a, b: a + b, lambda d: te.const(0, d)),
    "mean": (lambda a, b: a + b, lambda d: te.const(0, d)),
    "prod": (lambda a, b: a * b, lambda d: te.const(1, d)),
    "multiply": (lambda a, b: a * b, lambda d: te.const(1, d)),
    "amax": (_max, lambda d: te.const(-math.inf, d) if dt.is_float(d) else te.min_value(d)),
    "amin": (_min, lambda d: te.const(math.inf, d) if dt.is_float(d) else te.max_value(d)),
}


@dataclass(frozen=True)
class Fibers:
    """Where a scatter's source lands: the output viewed as (outer, extent, inner), the source
    as (source_outer, count, source_inner). `target(o, k, b)` is the position along `extent`
    and whether it is valid; `per_k`: it does not depend on o or b (index_put's indices).
    `out_outer(o)` and `out_inner(b)` are the output's positions of the source's o and b (the
    same where the source is as wide as the output)."""

    outer: object
    extent: object
    inner: object
    source_outer: object
    count: object
    source_inner: object
    target: Callable
    per_k: bool
    out_outer: Callable
    out_inner: Callable


def _few_fibers(f: Fibers) -> bool:
    """Are there too few fibers to keep a GPU busy (each thread would walk many sources)?"""
    fibers = f.source_outer * f.source_inner
    return (
        isinstance(fibers, int) and fibers < FEW_FIBERS and isinstance(f.count, int) and f.count > 1
    )


def _walk(
    ib,
    fibers: Fibers,
    cuda: bool,
    passes: list[Callable],
    lanes: int = 1,
    alone=None,
    task: tuple[Callable, Callable] | None = None,
    chunk: int = CHUNK,
) -> None:
    """Each pass `visit(position, k, o, b)` over the fibers' source positions, in order per
    fiber; a task's fibers are one CUDA thread's (o, b), or a CPU chunk of b's for one o.
    On CUDA, where there are few fibers and an update `alone` tolerates others at the same
    position (an atomic add, or a plain store whose duplicates torch leaves undefined), it
    runs in a thread per source element instead. `task`: (begin(o, start, end),
    end(o, start, end)), called at the start and the end of each CPU task (the fibers b in
    [start, end) of one o, a chunk of at most `chunk`)."""
    f = fibers

    def position(o, t, b):
        return _position(f, o, t, b)

    def at(o, t, b):
        return ib.let("at", position(o, t, b))

    if cuda and alone is not None and _few_fibers(f):
        inner, count = wide(f.source_inner), wide(f.count)
        with each(ib, wide(f.source_outer) * count * inner, True, "s") as element:
            b, rest = ib.let("b", element % inner), ib.let("rest", element // inner)
            k, o = ib.let("k", rest % count), ib.let("o", rest // count)
            t, valid = f.target(o, k, b)
            with ib.if_scope(valid):
                alone(at(o, t, b), k, o, b)
        return
    if cuda:
        inner = wide(f.source_inner)
        with each(ib, wide(f.source_outer) * inner, True, "f") as fiber:
            o, b = ib.let("o", fiber // inner), ib.let("b", fiber % inner)
            for visit in passes:
                with ib.for_range(0, wide(f.count), name="k") as k:
                    t, valid = f.target(o, k, b)
                    with ib.if_scope(valid):
                        visit(at(o, t, b), k, o, b)
        return
    chunks = (wide(f.source_inner) + (chunk - 1)) // chunk
    one_task = isinstance(f.source_outer, int) and isinstance(f.source_inner, int)
    one_task = one_task and f.source_outer * -(-f.source_inner // chunk) <= 1
    with each(ib, wide(f.source_outer) * chunks, False, "f", parallel=not one_task) as each_task:
        o, c = ib.let("o", each_task // chunks), ib.let("c", each_task % chunks)
        start = ib.let("start", c * chunk)
        end = ib.let("end", te.min(start + chunk, wide(f.source_inner)))
        if task is not None:
            task[0](o, start, end)
        for visit in passes:
            with ib.for_range(0, wide(f.count), name="k") as k:
                if f.per_k:  # one target for the whole chunk
                    t, valid = f.target(o, k, None)
                    with ib.if_scope(valid):
                        t = ib.let("t", t)
                        if isinstance(f.source_inner, int) and f.source_inner <= chunk:
                            # one chunk of a static width: whole vectors, then the tail
                            def element(b, t=t, k=k, visit=visit):
                                visit(position(o, t, b), k, o, b)

                            vector_loop(ib, f.source_inner, lanes, element, name="b")
                            continue
                        with ib.for_range(start, end, name="b") as b:
                            visit(at(o, t, b), k, o, b)
                    continue
                with ib.for_range(start, end, name="b") as b:
                    t, valid = f.target(o, k, b)
                    with ib.if_scope(valid):
                        visit(at(o, t, b), k, o, b)
        if task is not None:
            task[1](o, start, end)


def _position(f: Fibers, o, t, b) -> te.Expr:
    """The output position of fiber (o, b) at t along the scattered axis."""
    outer, inner = wide(f.out_outer(o)), wide(f.out_inner(b))
    return (outer * wide(f.extent) + t) * wide(f.inner) + inner


LOCAL_COUNTS = 1 << 14  # a task's counts of a mean, on its stack (64 KiB of float32)


def _counts_width(f: Fibers) -> int | None:
    """The fibers a CPU task of a mean walks, its counts (that many of each of the extent's
    positions) on its stack; None where even one fiber's do not fit (the counts are then the
    whole output's, allocated each call: 1 MB for 256 x 1024, a pass setting the reached ones
    to 1 and one dividing them cost 3.6 ms where eager took 1.0, the sum alone 0.14)."""
    if f.per_k or not isinstance(f.extent, int) or f.extent > LOCAL_COUNTS:
        return None
    width = min(CHUNK, LOCAL_COUNTS // f.extent)
    return min(width, f.source_inner) if isinstance(f.source_inner, int) else width


def scatter_kernel(ctx, node, x: Lazy, operands, fibers_of, reduce: str | None, include_self=True):
    """The kernel of a scatter: out = x, then for each source position its update (assigned
    where `reduce` is None, else combined as REDUCTIONS[reduce] says)."""
    cuda = ctx.target.kind == "cuda"
    dtype = x.dtype
    acc = opmath_dtype(dtype)
    if reduce == "mean" and not dt.is_float(dtype):
        raise Unsupported("scatter_reduce 'mean' of integers (eager divides with rounding down)")
    if dt.is_bool(dtype) and reduce is not None:
        raise Unsupported(f"scatter reduce '{reduce}' of bool")
    combine, identity = REDUCTIONS[reduce] if reduce is not None else (None, None)
    count_dtype = "float64" if dtype == "float64" else "float32"
    size = numel(x.shape)

    def program(ib, ins, out):
        fibers, value = fibers_of(ins)
        lanes = 1 if cuda else ctx.target.vector_lanes(acc)
        width = _counts_width(fibers) if reduce == "mean" and not cuda else None
        counts, task = None, None
        row: dict = {}  # the task's own counts, its first fiber and its o
        if width is not None:
            extent = fibers.extent
            one = te.const(1 if include_self else 0, count_dtype)

            def begin(o, start, end):
                row["counts"] = ib.allocate(count_dtype, extent * width, "task_counts", "local")
                row["start"] = start
                fill = lambda t: row["counts"].__setitem__(t, one)  # noqa: E731
                vector_loop(ib, extent * width, lanes, fill, "z")

            def finish(o, t, b):  # (not reached: a count of 1 divides, of 0 keeps x)
                n = row["counts"][t * width + (b - row["start"])]
                at = _position(fibers, o, t, b)
                mean = out[at].astype(count_dtype) / n
                mean = mean.astype(dtype) if mean.dtype != dtype else mean
                out[at] = te.if_then_else(n > te.const(0, count_dtype), mean, out[at])

            def end(o, start, end):
                if width == 1 and is_one(fibers.inner):  # a row (along the last axis)
                    vector_loop(ib, extent, lanes, lambda t: finish(o, t, start), "m")
                    return
                with ib.for_range(0, wide(extent), name="m") as t:
                    with ib.for_range(start, end, name="mb") as b:
                        finish(o, t, b)

            task = (begin, end)
        elif reduce == "mean":
            counts = ib.allocate(count_dtype, wide(size), name="counts", scope="global")
        copy(ib, ins[0], out, size, cuda)

        def count_of(at, k, o, b):
            """(buffer, index) of the count of output position `at` (source position k, o, b)."""
            if width is None:
                return counts, at
            t, _ = fibers.target(o, k, b)  # (the load the update made: one)
            return row["counts"], t * width + (b - row["start"])

        def reset(at, k, o, b):
            if not include_self:
                out[at] = identity(dtype)
            if counts is not None:
                counts[at] = te.const(1 if include_self else 0, count_dtype)

        def update(at, k, o, b):
            v = value(o, k, b)
            if combine is None:
                out[at] = v.astype(dtype) if v.dtype != dtype else v
                return
            old = out[at].astype(acc) if acc != dtype else out[at]
            new = v.astype(acc) if v.dtype != acc else v
            result = combine(old, new)
            out[at] = result.astype(dtype) if result.dtype != dtype else result
            if reduce == "mean":
                buffer, i = count_of(at, k, o, b)
                buffer[i] = buffer[i] + te.const(1, count_dtype)

        def divide(at, k, o, b):
            with ib.if_scope(counts[at] > te.const(0, count_dtype)):
                mean = out[at].astype(count_dtype) / counts[at]
                out[at] = mean.astype(dtype) if mean.dtype != dtype else mean
                counts[at] = te.const(0, count_dtype)

        def atomic_add(at, k, o, b):
            v = value(o, k, b)
            ib.emit(tir.call_extern(dtype, "atomicAdd", tir.address_of(out[at]), v))

        passes = ([reset] if (not include_self or counts is not None) else []) + [update]
        passes += [divide] if counts is not None else []
        alone = None  # what one source element may do alone, racing others (CUDA)
        if passes == [update] and reduce is None:
            alone = update  # (torch leaves duplicates undefined)
        elif passes == [update] and reduce in ("sum", "add") and dtype in ATOMIC_ADD_TYPES:
            alone = atomic_add
        _walk(ib, fibers, cuda, passes, lanes, alone, task, width or CHUNK)

    return extern_kernel(ctx, node, [x, *operands], x.shape, dtype, program)


# -- scatter, scatter_add, scatter_reduce -------------------------------------------------------
def _scatter(ctx, node, x, dim, index, src, reduce=None, include_self=True):
    x, index = ctx.no_anchor(x), ctx.no_anchor(index)
    if index.dtype not in ("int32", "int64"):
        raise Unsupported(f"scatter with {index.dtype} indices")
    ndim = x.ndim
    if ndim == 0 or index.ndim != ndim:
        raise Unsupported("scatter of a 0-d tensor, or with an index of another rank")
    dim = dim % ndim
    shape, ishape = tuple(x.shape), tuple(index.shape)
    scalar = not isinstance(src, Lazy)
    if not scalar:
        src = ctx.no_anchor(src)
        if src.ndim != ndim or src.dtype != x.dtype:
            raise Unsupported("scatter source of another rank or dtype")
    larger = [(i, s) for d, (i, s) in enumerate(zip(ishape, shape)) if d != dim]
    larger += [] if scalar else list(zip(ishape, src.shape))
    if not all(_at_most(i, s) for i, s in larger):
        raise Unsupported("scatter index larger than its input (eager raises), or maybe larger")
    inner, source_inner = math.prod(shape[dim + 1 :]), math.prod(ishape[dim + 1 :])
    extent, count = wide(shape[dim]) if not isinstance(shape[dim], int) else shape[dim], ishape[dim]
    source_outer = math.prod(ishape[:dim])

    def remap(to_shape, part: slice):
        """Index position (over ishape[part]) -> the same coordinates' in to_shape[part]."""
        if same_shape(tuple(to_shape[part]), ishape[part]):
            return lambda o: o
        return lambda o: _ravel(_unravel(o, ishape[part]), to_shape[part])

    before, after = slice(0, dim), slice(dim + 1, ndim)

    def fibers_of(ins):
        index_ptr = ins[1]
        src_outer = remap(src.shape, before) if not scalar else None
        src_inner = remap(src.shape, after) if not scalar else None

        def target(o, k, b):
            t = index_ptr[(wide(o) * count + k) * source_inner + b]
            t = wide(t)
            return t, (t >= 0) & (t < extent)

        def value(o, k, b):
            if scalar:
                return te.const(src, x.dtype)
            src_width = math.prod(src.shape[dim + 1 :])
            at = (wide(src_outer(o)) * src.shape[dim] + k) * src_width + src_inner(b)
            return ins[2][at]

        fibers = Fibers(
            math.prod(shape[:dim]), extent, inner, source_outer, count, source_inner,
            target, False, remap(shape, before), remap(shape, after),
        )  # fmt: skip
        return fibers, value

    operands = [index] if scalar else [index, src]
    return scatter_kernel(ctx, node, x, operands, fibers_of, reduce, include_self)


def _at_most(size, bound) -> bool:
    """size <= bound, where it can be told before run time (equal symbolic sizes, numbers)."""
    if isinstance(size, int) and isinstance(bound, int):
        return size <= bound
    return same_size(size, bound) or is_one(size)


def _unravel(flat, shape):
    coords = []
    for s in reversed(shape):
        coords.append(flat % s)
        flat = flat // s
    return list(reversed(coords))


def _ravel(coords, shape):
    flat = te.const(0, "int64")
    for c, s in zip(coords, shape):
        flat = flat * s + c
    return flat


@lowers(aten.scatter.src, aten.scatter.value)
def scatter(ctx, node, x, dim, index, src):
    return _scatter(ctx, node, x, dim, index, src)


@lowers(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_reduce_old(ctx, node, x, dim, index, src, reduce):
    return _scatter(ctx, node, x, dim, index, src, reduce)


@lowers(aten.scatter_add.default)
def scatter_add(ctx, node, x, dim, index, src):
    return _scatter(ctx, node, x, dim, index, src, "sum")


def _reduce_of(node) -> str:
    return node.args[4] if len(node.args) > 4 else node.kwargs.get("reduce")


def _mean_of_long_axes(node) -> bool:
    """A mean scatter along an axis too long for a task's counts on its stack (`_counts_width`:
    the counts are then the whole output's)."""
    if _reduce_of(node) != "mean":
        return False
    val = node.args[0].meta.get("val") if hasattr(node.args[0], "meta") else None
    shape = tuple(getattr(val, "shape", ()))
    if not shape:
        return True
    extent = shape[node.args[1] % len(shape)]
    return not (isinstance(extent, int) and extent <= LOCAL_COUNTS)


# 1 thread, 256 x 1024 along rows (load ~6 on 2 cores): mean 0.95 ms eager against 0.34 with a
# row's counts on the stack; with the whole output's counts 0.60 against 2.67 (a 1 MB array
# allocated each call, a third pass); amax without self 2.16 against 0.41, sum 0.17 / 0.14.
# Means along other axes, a task's counts on its stack (index as large as x, load ~9): 1024 x
# 256 along 0 2.18 against 1.61 (the whole output's counts: 2.28), 8192 x 64 along 0 6.01
# against 2.51 (6.39), 16 x 256 x 64 along 1 2.22 against 0.92 (2.41), 64^3 along 0 2.05
# against 0.95 (2.95), 4096 x 17 along 0 0.58 against 0.30; 256 x 1024 along 1 0.86 / 0.28.
eager_on_cpu(aten.scatter_reduce.two, when=_mean_of_long_axes, what="mean (of a long axis)")


@lowers(aten.scatter_reduce.two)
def scatter_reduce(ctx, node, x, dim, index, src, reduce, include_self=True):
    if reduce not in REDUCTIONS:
        raise Unsupported(f"scatter_reduce '{reduce}'")
    return _scatter(ctx, node, x, dim, index, src, reduce, include_self)


# -- index_put ------------------------------------------------------------------------------------
def _broadcast_shape(shapes: list[tuple]) -> tuple:
    """The shape `shapes` broadcast to (sizes known only at run time must match, or be 1)."""
    rank = max(len(s) for s in shapes)
    out = []
    for d in range(rank):
        sizes = [s[d - rank + len(s)] for s in shapes if d - rank + len(s) >= 0]
        wider = [size for size in sizes if not is_one(size)]
        if any(not same_size(size, wider[0]) for size in wider):
            raise Unsupported(f"index_put of shapes {shapes} that may not broadcast")
        out.append(wider[0] if wider else 1)
    return tuple(out)


def _broadcast(value: Lazy, shape: tuple) -> Lazy:
    if same_shape(tuple(value.shape), tuple(shape)):
        return value
    return Lazy(
        shape,
        value.dtype,
        lambda idx: value.at(broadcast_index(idx, value.shape, shape)),
        value.reads,
        value.nodes,
        value.cost,
    )


def _masked_put(ctx, x: Lazy, masks: list, lead: int, values: Lazy, accumulate: bool) -> Lazy:
    """`x[..., mask] = v` (or `+= v`) of one value for every element the mask selects: a
    select, element-wise. (Values one per selected element need the selected count before each
    element: those run eagerly.)"""
    (mask,) = masks if len(masks) == 1 else (None,)
    if mask is None or mask.dtype not in ("bool", "uint8"):
        raise Unsupported("index_put with several masks, or masks beside indices")
    if values.dtype != x.dtype or not all(is_one(d) for d in values.shape):
        raise Unsupported("index_put of a mask with one value per selected element")
    if accumulate and x.dtype == "bool":
        raise Unsupported("index_put accumulating into bools")
    m = mask.ndim
    if not same_shape(tuple(mask.shape), tuple(x.shape[lead : lead + m])):
        raise Unsupported("index_put of a mask of another shape than the dimensions it indexes")
    zeros = (0,) * values.ndim

    def put(index):
        old, new = x.at(index), values.at(zeros)
        selected = mask.at(tuple(index[lead : lead + m]))
        if mask.dtype != "bool":
            selected = selected != te.const(0, mask.dtype)
        return te.if_then_else(selected, old + new if accumulate else new, old)

    reads = x.reads | mask.reads | values.reads
    return Lazy(tuple(x.shape), x.dtype, put, reads, x.nodes + mask.nodes + values.nodes, 2)


@lowers(aten.index_put.default)
def index_put(ctx, node, x, indices, values, accumulate=False):
    x, values = ctx.no_anchor(x), ctx.no_anchor(values)
    shape = tuple(x.shape)
    lead = 0
    while lead < len(indices) and indices[lead] is None:
        lead += 1
    tensors = list(indices[lead:])
    if not tensors or any(not isinstance(t, Lazy) for t in tensors):
        raise Unsupported("index_put with indices that are not adjacent tensors")
    if any(t.dtype not in ("int32", "int64") for t in tensors):
        return _masked_put(ctx, x, tensors, lead, values, accumulate)
    if values.dtype != x.dtype:
        raise Unsupported("index_put of values of another dtype")
    batch = _broadcast_shape([tuple(t.shape) for t in tensors])
    k = len(tensors)
    dims = tuple(wide(d) if not isinstance(d, int) else d for d in shape[lead : lead + k])
    value_shape = shape[:lead] + batch + shape[lead + k :]
    if not same_shape(_broadcast_shape([tuple(values.shape), value_shape]), value_shape):
        raise Unsupported("index_put values larger than the indexed region")
    tensors = [_broadcast(ctx.no_anchor(t), batch) for t in tensors]
    values = _broadcast(values, value_shape)
    outer, inner, count = math.prod(shape[:lead]), math.prod(shape[lead + k :]), math.prod(batch)

    def fibers_of(ins):
        index_ptrs = ins[1 : 1 + k]

        def target(o, q, b):
            flat, valid = te.const(0, "int64"), te.const(True)
            for ptr, size in zip(index_ptrs, dims):
                i = wide(ptr[q])
                valid = valid & (i >= -size) & (i < size)
                flat = flat * size + te.if_then_else(i < 0, i + size, i)
            return flat, valid

        def value(o, q, b):
            return ins[1 + k][(wide(o) * count + q) * inner + b]

        same = lambda o: o  # noqa: E731
        fibers = Fibers(
            outer, math.prod(dims), inner, outer, count, inner, target, True, same, same
        )
        return fibers, value

    reduce = "sum" if accumulate else None
    return scatter_kernel(ctx, node, x, [*tensors, values], fibers_of, reduce)
