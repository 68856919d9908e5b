"""The CPU multi-level tiling rule (SSRSRS) of the sketch (sketch.py applies the other rules).

A reduction with data reuse (matmul, conv) is tiled in four spatial levels and two reduction
levels. Its single element-wise consumer, if any, holds the outer spatial levels and computes the
reduction inside them (consumer fusion); otherwise a cache_write stage plays that part (a
decision). The accumulators are an L2 block of register tiles or, when the reduction is one
block and nothing is packed, the register tile itself (a decision); the inner levels are the
register tile: rows unrolled, columns vectors, a few k steps unrolled around it (a decision); the
vector operand may be packed into a contiguous panel per block (a decision).
"""

from __future__ import annotations

import math
from typing import Any

from tensorforge.te.visit import walk
from tensorforge.tune.auto.extents import extent_of, extent_of_dim
from tensorforge.tune.auto.sketch import UNROLL_STEPS, _reads


def multi_level_tiling(b: Any, stage: Any) -> None:
    """SSRSRS (CPU) / SSSRRSRS (GPU) tiling, with a fused consumer or a cache_write stage
    holding the outer spatial levels."""
    op = stage.op
    key = b.key(op)
    if b.gpu:
        b.gpu_tiling(stage, key)
        return
    consumer = b.plan.fused_into.get(id(op))
    outer = None
    inner = stage
    if consumer is not None:
        outer = b.s[consumer]
    elif b.d.choice(f"cw:{key}", [True, False], {}):
        inner = b.rec.cache_write(stage, "local")
        outer = stage
    spatial = [extent_of(iv) for iv in op.axis]
    reduce = [extent_of(iv) for iv in op.reduce_axis]
    lanes = b.lanes(stage)
    hint = {"spatial": spatial, "reduce": reduce, "lanes": lanes, "op": op}
    s_tiles = b.d.tile(f"tile:{key}", spatial, 4, hint)
    r_tiles = b.d.tile(f"rtile:{key}", reduce, 2, hint)
    unroll = b.d.choice(f"unroll:{key}", list(UNROLL_STEPS), hint)
    sp_axes = list(inner.leaf_iter_vars[: len(op.axis)])
    red_axes = list(inner.leaf_iter_vars[len(op.axis) :])
    if outer is not None:
        packable = packable_inputs(b, op) if red_axes else []
        rows = max((extent_of_dim(t, -1) for t in packable), default=0)
        pack = bool(packable) and b.d.choice(
            f"pack:{key}", [False, True], {**hint, "row_elements": rows}
        )
        at_tile = accumulate_at_tile(b, key, reduce, r_tiles, pack, hint)
        o_axes = list(outer.leaf_iter_vars[: len(op.axis)])
        # loops per axis: the rest, blocks, then register tiles and the tile itself (at_tile)
        # or the whole block
        levels = [
            b.rec.split_many(outer, a, [t[0], t[1], t[2]] if at_tile else [t[0], t[1] * t[2]])
            for a, t in zip(o_axes, s_tiles)
        ]
        depth = len(levels[-1])
        b.rec.reorder(outer, [lv[k] for k in range(depth) for lv in levels])
        b.parallel_outer(outer, key, [lv[0] for lv in levels])
        last = levels[-1][-1]
        if last is not levels[-1][-2] and s_tiles[-1][-1] * (1 if at_tile else s_tiles[-1][1]) > 1:
            # the epilogue (copy-out, fused consumer) in vectors of the register tile's
            # width, not one vector of the whole block row: a 128-lane erf ran ~2x slower
            vector = last
            if not at_tile and s_tiles[-1][1] > 1 and s_tiles[-1][2] > 1:
                _, vector = b.rec.split(outer, vector, s_tiles[-1][2])
            b.rec.annotate("vectorize", outer, vector)
        b.rec.compute_at(inner, outer, levels[-1][-2])
        s_levels = [b.rec.split_many(inner, a, [t[2]]) for a, t in zip(sp_axes, s_tiles)]
        r_levels = [b.rec.split_many(inner, a, t) for a, t in zip(red_axes, r_tiles)]
        s2 = [lv[0] for lv in s_levels]
        if pack:  # the last axis's block loop first: its packed panel serves the others
            s2 = s2[-1:] + s2[:-1]
        order = [lv[0] for lv in r_levels] + s2
        order += [lv[1] for lv in r_levels] + [lv[1] for lv in s_levels]
        b.rec.reorder(inner, order)
        k_step(b, inner, key, r_levels, r_tiles, hint)
        if pack:
            pack_panels(b, inner, packable, s2[0])
        innermost = [lv[1] for lv in s_levels]
    else:
        s_levels = [b.rec.split_many(inner, a, t) for a, t in zip(sp_axes, s_tiles)]
        r_levels = [b.rec.split_many(inner, a, t) for a, t in zip(red_axes, r_tiles)]
        order = (
            [lv[0] for lv in s_levels]
            + [lv[1] for lv in s_levels]
            + [lv[0] for lv in r_levels]
            + [lv[2] for lv in s_levels]
            + [lv[1] for lv in r_levels]
            + [lv[3] for lv in s_levels]
        )
        b.rec.reorder(inner, order)
        k_step(b, inner, key, r_levels, r_tiles, hint)
        if b.is_placed(inner):
            b.parallel_outer(inner, key, [lv[0] for lv in s_levels])
        else:
            b.locate([inner], key)
        innermost = [lv[3] for lv in s_levels]
    if s_tiles[-1][-1] > 1:
        b.rec.annotate("vectorize", inner, innermost[-1])
    for iv, t in zip(innermost[:-1], s_tiles[:-1]):
        if 1 < t[-1] <= 16:
            b.rec.annotate("unroll", inner, iv)
    if unroll:
        first = inner.leaf_iter_vars[0]
        b.rec.pragma(inner, first, "auto_unroll_max_step", unroll)


def accumulate_at_tile(
    b: Any, key: str, reduce: list[int], r_tiles: list, pack: bool, hint: dict
) -> bool:
    """Where the accumulators live when the whole reduction is one block (a decision): a
    block of them in memory (L2), each register tile loading and storing its part, or
    just the register tile, computed inside the output's tile loop and written out from
    registers (ops' conv2d, and ops/matmul's panels for short k: a 1x1 convolution over 64
    channels does only 64 FMA steps per load and store of a tile). Not with a packed
    panel, which would be packed again for every tile."""
    single = all(math.prod(t) >= e for t, e in zip(r_tiles, reduce))
    if not single or pack:
        return False
    return b.d.choice(f"acc:{key}", [False, True], hint)


def k_step(b: Any, inner: Any, key: str, r_levels: list, r_tiles: list, hint: dict) -> None:
    """Unroll a few steps of the innermost reduction loop around the register tile (a
    decision): one loop step then holds several rows x vectors of FMAs, as ops/matmul's
    micro-kernel does (GEMM 1024³, AVX-512: k steps of 4 1.07x steps of 1)."""
    # the innermost reduction axis with more than one step in the block (a 1x1
    # convolution's channels, not its kernel's extent-1 axes)
    axis = next((a for a in reversed(range(len(r_tiles))) if r_tiles[a][-1] > 1), None)
    if axis is None:
        return
    extent = r_tiles[axis][-1]
    options = sorted({u for u in (1, 2, 4, 8, extent) if u <= 8 and extent % u == 0})
    step = b.d.choice(f"kstep:{key}", options, {**hint, "extent": extent})
    if step > 1:
        loop = r_levels[axis][-1]
        if step < extent:
            _, loop = b.rec.split(inner, loop, step)
        b.rec.annotate("unroll", inner, loop)


def packable_inputs(b: Any, op: Any) -> list[Any]:
    """Inputs of a tiled reduction read as vectors along its last axis but not along some
    other spatial axis (matmul's B): worth copying, block by block, into a contiguous panel
    (their rows may be far apart in memory, thrashing a cache set per row)."""
    spatial = [iv.var for iv in op.axis]
    out = []
    for t in {id(t.op): t for t in op.input_tensors}.values():
        reads = [r for r in _reads(op) if r.tensor.op is t.op]
        last_index = [r.indices[-1] for r in reads if r.indices]
        uses_last = all(any(n is spatial[-1] for n in walk(i)) for i in last_index)
        used = {n for r in reads for index in r.indices for n in walk(index) if n in spatial}
        inlined = t.op in b.s and b.s[t].attach_type == "inline"
        if reads and last_index and uses_last and set(spatial) - used and not inlined:
            out.append(t)
    return out


def pack_panels(b: Any, inner: Any, tensors: list[Any], loop: Any) -> None:
    """cache_read each of `tensors` for `inner` into a local panel filled at `loop`."""
    for t in tensors:
        source = b.s[t]
        cache = b.rec.cache_read(source, "local", [inner])
        b.rec.compute_at(cache, inner, loop)
        axes = cache.leaf_iter_vars
        if axes:
            b.rec.annotate("vectorize", cache, axes[-1])
