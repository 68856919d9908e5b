"""Kernels written as tir.ir_builder programs (te.extern stages) in the graph layer, and the
loop shapes they share.

`extern_kernel` materializes the operands, declares the te.extern stage and appends its
KernelSpec, whose anchor (kind "extern") tells the schedulers to leave it as written: the
program chooses its own loops, parallel on the CPU and bound to blocks and threads on CUDA.
Every buffer is contiguous and read with flat row-major indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from tensorforge import te
from tensorforge.graph.lowered import KernelSpec
from tensorforge.graph.values import Anchor, Buffer, Lazy, Unsupported, is_one, read_buffer
from tensorforge.tir import ir_builder

THREADS = 256  # CUDA threads a block
CHUNK = 256  # contiguous elements one CPU task walks per source position


def extern_kernel(
    ctx,
    node,
    operands: Sequence[Lazy],
    shape: tuple,
    dtype: str,
    program: Callable,
) -> Lazy:
    """The value a kernel computes with `program(ib, ins, out)` (ir_builder pointers, flat)
    from `operands` (in memory, contiguous) into a new buffer of `shape` and `dtype`."""
    (value,) = extern_kernel_outputs(
        ctx, node, operands, shape, (dtype,), lambda ib, ins, outs: program(ib, ins, outs[0])
    )
    return value


def extern_kernel_outputs(
    ctx,
    node,
    operands: Sequence[Lazy],
    shape: tuple,
    dtypes: Sequence[str],
    program: Callable,
    view: tuple | None = None,
) -> tuple[Lazy, ...]:
    """The values one kernel computes with `program(ib, ins, outs)` (ir_builder pointers,
    flat): a new buffer of `shape` per dtype in `dtypes` (a sort's values and indices), each
    read as `view` where given (the same elements in another shape)."""
    if not shape:
        raise Unsupported("a 0-d result")
    buffers = [_source(ctx.buffer(v)) for v in operands]
    name = ctx.unique(node.name)

    def fcompute(ins, outs):
        ib = ir_builder.create()
        program(ib, [ib.buffer_ptr(b) for b in ins], [ib.buffer_ptr(b) for b in outs])
        return ib.get()

    placeholders = [b.placeholder for b in buffers]
    shapes = [tuple(shape)] * len(dtypes)
    outs = te.extern(shapes, placeholders, fcompute, name=f"{name}_out", dtype=list(dtypes))
    outs = outs if isinstance(outs, list) else [outs]
    single = len(dtypes) == 1  # (a buffer holds the node's value only where it is the only one)
    kept = [
        Buffer(
            name if single else f"{name}_{k}",
            tuple(shape),
            d,
            "temp",
            node.name if single else None,
        )
        for k, d in enumerate(dtypes)
    ]
    reads = sorted(set(buffers), key=lambda b: b.name)
    nodes = (node.name,)
    anchor = Anchor(
        "extern", outs[0], frozenset(reads), nodes, {"shape": tuple(shape), "stages": []}
    )
    more = tuple(zip(outs[1:], kept[1:]))
    ctx.program.steps.append(
        KernelSpec(
            f"k{len(ctx.program.steps)}_{name}", outs[0], kept[0], reads, anchor, nodes, more
        )
    )
    return tuple(read_buffer(b, view) for b in kept)


def _source(value: Lazy) -> Buffer:
    assert value.source is not None and value.anchor is None
    return value.source


def numel(shape: Sequence) -> object:
    return math.prod(shape) if all(isinstance(s, int) for s in shape) else _product(shape)


def _product(shape: Sequence):
    total = te.const(1, "int64")
    for s in shape:
        total = total * (s.astype("int64") if isinstance(s, te.Expr) else s)
    return total


def wide(e) -> te.Expr:
    """An index as int64 (sizes past 2**31 elements stay exact)."""
    e = e if isinstance(e, te.Expr) else te.const(e, "int64")
    return e if e.dtype == "int64" else e.astype("int64")


@contextmanager
def each(ib, extent, cuda: bool, name: str, parallel: bool = True) -> Iterator[te.Expr]:
    """A loop over [0, extent): parallel on the CPU (serial where `parallel` is false), one
    CUDA thread per iteration (blocks of THREADS, the tail guarded)."""
    if not cuda:
        kind = (
            "parallel" if parallel and not (isinstance(extent, int) and extent <= 1) else "serial"
        )
        with ib.for_range(0, wide(extent), name=name, kind=kind) as i:
            yield i
        return
    with ib.new_scope():
        block, thread = te.thread_axis("blockIdx.x"), te.thread_axis("threadIdx.x")
        blocks = (wide(extent) + (THREADS - 1)) // THREADS
        ib.scope_attr(block, "thread_extent", blocks.astype("int32"))
        ib.scope_attr(thread, "thread_extent", THREADS)
        i = ib.let(name, block.var.astype("int64") * THREADS + thread.var.astype("int64"))
        with ib.if_scope(i < wide(extent)):
            yield i


def vector_loop(ib, extent, lanes: int, body: Callable, name: str = "d") -> None:
    """`body(d)` for d in [0, extent): whole vectors of `lanes` (a vectorized inner loop),
    then the tail one element at a time (`body` is called twice: the vectors', the tail's).
    An extent known only at run time is one plain loop."""
    if not isinstance(extent, int):
        with ib.for_range(0, wide(extent), name=name) as d:
            body(d)
        return
    whole = extent - extent % lanes if lanes > 1 else 0
    if whole:
        with ib.for_range(0, whole // lanes, name=f"{name}v") as v:
            with ib.for_range(0, lanes, name=f"{name}l", kind="vectorize") as lane:
                body(v * lanes + lane)
    if whole < extent:
        with ib.for_range(whole, extent, name=name) as d:
            body(d)


def copy(ib, src, out, count, cuda: bool) -> None:
    """out[:count] = src[:count] (cast to out's dtype): chunks in parallel on the CPU."""
    if cuda:
        with each(ib, count, True, "e") as e:
            out[e] = _cast(src[e], out.dtype)
        return
    if isinstance(count, int) and count <= CHUNK * 4:
        with ib.for_range(0, wide(count), name="e") as e:
            out[e] = _cast(src[e], out.dtype)
        return
    chunks = (wide(count) + (CHUNK * 16 - 1)) // (CHUNK * 16)
    with ib.for_range(0, chunks, name="c", kind="parallel") as c:
        start = ib.let("start", c * (CHUNK * 16))
        end = ib.let("end", te.min(start + CHUNK * 16, wide(count)))
        with ib.for_range(start, end, name="e") as e:
            out[e] = _cast(src[e], out.dtype)


def _cast(e: te.Expr, dtype: str) -> te.Expr:
    return e if e.dtype == dtype else e.astype(dtype)


class Lines:
    """A tensor's lines along dimension `d` (a sort's rows, a scan's), the tensor viewed as
    (outer, extent, inner): line r = (o, b) starts at o * extent * inner + b and steps by
    `inner`; a result of another extent along d (topk's k, kthvalue's 1) has its line r at
    o * its_extent * inner + b."""

    def __init__(self, shape: Sequence, d: int):
        self.outer, self.extent = numel(shape[:d]), shape[d]
        self.inner = numel(shape[d + 1 :])
        self.count = _times(self.outer, self.inner)

    def start(self, r: te.Expr, extent=None) -> te.Expr:
        extent = self.extent if extent is None else extent
        if is_one(self.inner):
            return r * wide(extent)
        inner = wide(self.inner)
        return (r // inner) * (wide(extent) * inner) + r % inner


def _times(a, b):
    return a * b if isinstance(a, int) and isinstance(b, int) else wide(a) * wide(b)
