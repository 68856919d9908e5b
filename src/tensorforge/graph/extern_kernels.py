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
from tensorforge.graph.values import Anchor, Buffer, Lazy, Unsupported, read_buffer
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
    if not shape:
        raise Unsupported("a 0-d result")
    buffers = [_source(ctx.buffer(v)) for v in operands]
    name = ctx.unique(node.name)

    def fcompute(ins, outs):
        ib = ir_builder.create()
        program(ib, [ib.buffer_ptr(b) for b in ins], ib.buffer_ptr(outs[0]))
        return ib.get()

    placeholders = [b.placeholder for b in buffers]
    out = te.extern(shape, placeholders, fcompute, name=f"{name}_out", dtype=dtype)
    buf = Buffer(name, tuple(shape), dtype, "temp", node.name)
    reads = sorted(set(buffers), key=lambda b: b.name)
    nodes = (node.name,)
    anchor = Anchor("extern", out, frozenset(reads), nodes, {"shape": tuple(shape), "stages": []})
    ctx.program.steps.append(
        KernelSpec(f"k{len(ctx.program.steps)}_{name}", out, buf, reads, anchor, nodes)
    )
    return read_buffer(buf)


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
