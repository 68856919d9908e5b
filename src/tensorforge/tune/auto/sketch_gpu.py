"""The GPU sketch rules (the CPU ones are in sketch.py; both draw from the same decisions).

- element-wise root stages: all loops fused, split into blocks of `threads` threads;
- reductions without reuse: a cross-thread reduction (the inner part of the reduction axis bound
  to threadIdx.x), one block per output element group;
- reductions with reuse: `SSSRRSRS` tiling. The consumer (or the cache_write copy-out) takes the
  outer levels bound to blockIdx.x, vthread and threadIdx.x; the reduction is computed per thread
  into registers ("local") inside it, its reduction split in three; every input is staged through
  shared memory per outer reduction block, fetched cooperatively by the block's threads (in
  float2/float4 pieces where the shapes allow, rows padded against bank conflicts, in 1-3 copies
  so that the next slices load while this one is computed on).
Limits come from the target: threads per block, accumulators within a third of a thread's
registers. The first guess (analytic.py) takes ops' hand GEMM schedule from the same space.
Every non-inlined stage stays at root: one kernel each.
"""

from __future__ import annotations

import math
from typing import Any

from tensorforge.tune.auto.extents import extent_of

MAX_THREADS = 1024
MAX_VTHREADS = 16
MAX_LOCAL = 64  # accumulators per thread


def gpu_elementwise(b: Any, stage: Any, key: str, axes: list[Any]) -> None:
    fused = b.rec.fuse(stage, axes)
    threads = b.d.choice(f"threads:{key}", [64, 128, 256, 512], {})
    bx, tx = b.rec.split(stage, fused, threads)
    b.rec.bind(stage, bx, "blockIdx.x")
    b.rec.bind(stage, tx, "threadIdx.x")


def gpu_reduction(b: Any, stage: Any, key: str) -> None:
    """Cross-thread reduction over the last reduction axis; the spatial loops become blocks."""
    op = stage.op
    spatial = list(stage.leaf_iter_vars[: len(op.axis)])
    reduce = list(stage.leaf_iter_vars[len(op.axis) :])
    threads = b.d.choice(f"threads:{key}", [32, 64, 128, 256, 512], {})
    _, ki = b.rec.split(stage, reduce[-1], threads)
    if spatial:
        block = b.rec.fuse(stage, spatial)
        b.rec.bind(stage, block, "blockIdx.x")
    b.rec.bind(stage, ki, "threadIdx.x")


def _repair(tiles: list[list[int]], level: int, limit: int) -> None:
    """Halve the `level` factors (outermost axis first) until their product is within `limit`."""
    while math.prod(t[level] for t in tiles) > limit:
        for t in tiles:
            if t[level] > 1:
                t[level] = max(1, t[level] // 2)
                break


def _repair_local(tiles: list[list[int]], limit: int) -> None:
    """Halve S3, then S4, then vthread factors until a thread's accumulators (vthread x S3 x S4
    over all axes) are within `limit`."""
    while math.prod(t[0] * t[2] * t[3] for t in tiles) > limit:
        for level in (2, 3, 0):
            if any(t[level] > 1 for t in tiles):
                _repair(tiles, level, math.prod(t[level] for t in tiles) // 2)
                break


def _grow_threads(tiles: list[list[int]], extents: list[int], want: int) -> None:
    """Double thread factors (innermost axis first) while the block has fewer than `want`
    threads and an axis has room for twice its tile: a block of less than a warp idles lanes."""
    grown = True
    while grown and math.prod(t[1] for t in tiles) < want:
        grown = False
        for t, extent in zip(reversed(tiles), reversed(extents)):
            if 2 * math.prod(t) <= extent:
                t[1] *= 2
                grown = True
                break


def shared_bytes(op: Any, inputs: Any, tiles: list[list[int]], r_tiles: list[list[int]]) -> int:
    """An estimate of one copy of the shared tiles of `inputs`: per dimension, the tiles of the
    loop variables its index reads, summed (a window `y + ry` spans both), at most the extent."""
    from tensorforge.te.expr import TensorRead
    from tensorforge.te.visit import walk

    tile = {id(iv.var): math.prod(t) for iv, t in zip(op.axis, tiles)}
    tile.update({id(iv.var): math.prod(t) for iv, t in zip(op.reduce_axis, r_tiles)})
    variables = {id(iv.var): iv.var for iv in (*op.axis, *op.reduce_axis)}
    reads = [n for body in op.body for n in walk(body) if isinstance(n, TensorRead)]
    total = 0
    for t in inputs:
        read = next((r for r in reads if r.tensor is t or r.tensor.op is t.op), None)
        if read is None:
            continue
        size = 1
        for index, dim in zip(read.indices, t.shape):
            span = _span(index, tile, variables)
            extent = getattr(dim, "value", None)
            size *= min(span, extent) if isinstance(extent, int) else span
        total += size * max(1, _bits(t.dtype) // 8)
    return total


def _span(index: Any, tile: dict, variables: dict) -> int:
    """Values one dimension's `index` takes over a block's tiles: the sum of its loop
    variables' tiles (a window `y + ry` spans both), or, through a quotient or remainder (a
    reshaped input: `x[i // 128, i % 128, k]`, GPT-2's activations as rows), its interval over
    tiles starting anywhere (a quotient's may straddle one step more). Counting 128 values for
    `i // 128` made a 128-row tile of a (32, 128, 768) input 32 x 128 rows, and the k slices
    were halved to 2 to fit: 384 barriers in a k loop of 768 (QKV at 4096 tokens 733 us)."""
    from tensorforge.ir.arith.interval import Analyzer, Interval
    from tensorforge.te.expr import FloorDiv, FloorMod, Var
    from tensorforge.te.visit import walk

    nodes = list(walk(index))
    used = {id(n) for n in nodes if isinstance(n, Var) and id(n) in tile}
    span = max(1, sum(tile[v] for v in used) - len(used) + 1)
    quotients = any(isinstance(n, FloorDiv) for n in nodes)
    if not used or not (quotients or any(isinstance(n, FloorMod) for n in nodes)):
        return span
    ranges = {variables[v]: Interval.from_range(0, tile[v]) for v in used}
    lo, hi = Analyzer(ranges).bounds(index)
    if not (isinstance(lo, int) and isinstance(hi, int)):
        return span
    return max(1, min(span, hi - lo + 1 + int(quotients)))


def _bits(dtype: str) -> int:
    digits = "".join(ch for ch in str(dtype) if ch.isdigit())
    return int(digits) if digits else 32


def _repair_shared(
    op: Any, inputs: Any, tiles: list[list[int]], r_tiles: list[list[int]], limit: int
) -> None:
    """Halve reduction slices, then S4, S3 and vthread factors, until one copy of the shared
    tiles fits in `limit` bytes."""
    while shared_bytes(op, inputs, tiles, r_tiles) > limit:
        factors = [(t, k) for t in r_tiles for k in range(len(t))]
        factors += [(t, k) for k in (3, 2, 0, 1) for t in tiles]
        t, k = max(factors, key=lambda f: f[0][f[1]] > 1)  # the first one above 1
        if t[k] == 1:
            return
        t[k] //= 2


def accumulator_budget(target: Any) -> int:
    """Accumulators one thread may keep: a power of two within a third of its registers (the
    rest hold the operand slivers, addresses and loop counters); 64 of 255 on CUDA."""
    registers = getattr(target, "registers_per_thread", 3 * MAX_LOCAL)
    return 1 << max(0, (registers // 3).bit_length() - 1)


def fetch_widths(op: Any, tensor: Any, tiles: list[list[int]], r_tiles: list[list[int]]) -> list:
    """The vector widths (1, 2, 4) a cooperative fetch of `tensor` into shared memory may use:
    every read of it must index its last dimension by one loop variable alone (`A[i, k]`, not
    `X[i + r]`) or its remainder by a multiple of its tile (`x[..., k % 64]`), whose tile divides
    that loop's extent and the width, and the last dimension must hold whole vectors (rows
    stay 16-byte aligned)."""
    from tensorforge.te.expr import TensorRead
    from tensorforge.te.visit import walk

    extents = {}
    for iv, t in zip(op.axis, tiles):
        extents[id(iv.var)] = (extent_of(iv), math.prod(t))
    for iv, t in zip(op.reduce_axis, r_tiles):
        extents[id(iv.var)] = (extent_of(iv), math.prod(t))
    shape = getattr(tensor, "shape", ())
    last_dim = getattr(shape[-1], "value", None) if shape else None
    if not isinstance(last_dim, int):
        return [1]
    reads = [n for body in op.body for n in walk(body) if isinstance(n, TensorRead)]
    reads = [r for r in reads if r.tensor is tensor or getattr(r.tensor, "op", None) is tensor.op]
    if not reads:
        return [1]
    out = [1]
    for width in (2, 4):
        ok = last_dim % width == 0
        for read in reads:
            entry = _last_index_tile(read.indices[-1], extents)
            ok = ok and entry is not None and entry[0] % entry[1] == 0 and entry[1] % width == 0
        if ok:
            out.append(width)
    return out


def _last_index_tile(index: Any, extents: dict) -> tuple[int, int] | None:
    """(extent, tile) of the loop variable a read's last index is, or is the remainder of by a
    constant its tile divides (`x[b, k // 64, t, k % 64]`: GPT-2's heads read as rows through a
    transpose and reshape; a tile of 16 k never crosses a row of 64, so it is 16 consecutive
    elements of one row, 16-aligned); None otherwise."""
    from tensorforge.ir.arith import simplify_expr
    from tensorforge.te.expr import Const, FloorMod

    index = simplify_expr(index)  # a view's index: (0 + (0 + k)) % 64
    if isinstance(index, FloorMod) and isinstance(index.b, Const):
        entry = extents.get(id(index.a))
        return entry if entry is not None and index.b.value % entry[1] == 0 else None
    return extents.get(id(index))


def gpu_tiling(b: Any, stage: Any, key: str) -> None:
    op = stage.op
    target = b.target
    consumer = b.plan.fused_into.get(id(op))
    if consumer is not None:
        outer, inner = b.s[consumer], stage
    else:
        inner = b.rec.cache_write(stage, "local")
        outer = stage
    spatial = [extent_of(iv) for iv in op.axis]
    reduce = [extent_of(iv) for iv in op.reduce_axis]
    hint = {"spatial": spatial, "reduce": reduce, "op": op}
    tiles = [list(t) for t in b.d.tile(f"gtile:{key}", spatial, 5, hint)]
    _repair(tiles, 0, MAX_VTHREADS)  # [vthread, thread, S3, S4]
    _repair(tiles, 1, getattr(target, "max_threads_per_block", MAX_THREADS))
    _repair_local(tiles, accumulator_budget(target))
    _grow_threads(tiles, spatial, getattr(target, "warp_size", 32))
    r_tiles = [list(t) for t in b.d.tile(f"grtile:{key}", reduce, 3, hint)]  # [R1, R2]
    inputs = list({id(t.op): t for t in inner.op.input_tensors}.values())
    inputs = [t for t in inputs if b.s[t].attach_type != "inline"]
    limit = getattr(target, "max_shared_memory_per_block", 48 * 1024)
    _repair_shared(op, inputs, tiles, r_tiles, limit)
    threads = math.prod(t[1] for t in tiles)
    o_axes = list(outer.leaf_iter_vars[: len(op.axis)])
    levels = [b.rec.split_many(outer, a, [t[0], t[1], t[2] * t[3]]) for a, t in zip(o_axes, tiles)]
    b.rec.reorder(outer, [lv[k] for k in range(4) for lv in levels])
    block = b.rec.fuse(outer, [lv[0] for lv in levels])
    vthread = b.rec.fuse(outer, [lv[1] for lv in levels])
    thread = b.rec.fuse(outer, [lv[2] for lv in levels])
    b.rec.bind(outer, block, "blockIdx.x")
    b.rec.bind(outer, vthread, "vthread")
    b.rec.bind(outer, thread, "threadIdx.x")
    b.rec.compute_at(inner, outer, thread)
    sp_axes = list(inner.leaf_iter_vars[: len(op.axis)])
    red_axes = list(inner.leaf_iter_vars[len(op.axis) :])
    s_levels = [b.rec.split_many(inner, a, [t[3]]) for a, t in zip(sp_axes, tiles)]
    r_levels = [b.rec.split_many(inner, a, t) for a, t in zip(red_axes, r_tiles)]
    order = [lv[0] for lv in r_levels] + [lv[1] for lv in r_levels] + [lv[0] for lv in s_levels]
    order += [lv[2] for lv in r_levels] + [lv[1] for lv in s_levels]
    b.rec.reorder(inner, order)
    for iv in [lv[1] for lv in s_levels]:
        b.rec.annotate("unroll", inner, iv)
    if r_levels and math.prod(r_tiles[-1]) <= 32:  # the k slice straight-line, or a loop
        if b.d.choice(f"kunroll:{key}", [True, False], hint):
            b.rec.annotate("unroll", inner, r_levels[-1][1])
            b.rec.annotate("unroll", inner, r_levels[-1][2])
    if r_levels and b.d.choice(f"shared:{key}", [True, False], hint):
        fetch_at = r_levels[-1][0]
        steps = math.prod(-(-e // math.prod(t)) for e, t in zip(reduce, r_tiles))
        # several copies of the tiles: the next k slices load while this one is computed on
        one = shared_bytes(op, inputs, tiles, r_tiles)
        fits = [k for k in (1, 2, 3) if k * one <= limit and (k == 1 or steps > 1)]
        buffers = b.d.choice(f"db:{key}", fits, hint)
        for n, t in enumerate(inputs):
            source = b.s[t]
            widths = fetch_widths(op, t, tiles, r_tiles)
            width = b.d.choice(f"fvec:{key}.{n}", widths, {**hint, "tensor": t})
            pads = [p for p in (0, 4, 8) if p % width == 0] if len(t.shape) >= 2 else [0]
            pad = b.d.choice(f"pad:{key}.{n}", pads, {**hint, "tensor": t})
            cache = b.rec.cache_read(source, "shared", [inner])
            b.rec.compute_at(cache, inner, fetch_at)
            if pad:  # row stride % 16 == pad: the rows a warp reads at once fall in other banks
                b.rec.storage_align(cache, len(t.shape) - 2, 16, pad)
            fused = b.rec.fuse(cache, list(cache.leaf_iter_vars))
            if width > 1:  # float2/float4 loads and stores, `width` consecutive elements a thread
                fused, vec = b.rec.split(cache, fused, width)
            _, tx = b.rec.split(cache, fused, threads)
            b.rec.bind(cache, tx, "threadIdx.x")
            if width > 1:
                b.rec.annotate("vectorize", cache, vec)
            if buffers > 1:
                b.rec.double_buffer(cache, buffers)
    unroll = b.d.choice(f"unroll:{key}", [0, 16, 64, 512], hint)
    if unroll:
        b.rec.pragma(inner, inner.leaf_iter_vars[0], "auto_unroll_max_step", unroll)
