"""The GPU sketch rules (the CPU ones are in sketch.py; both draw from the same decisions).

- element-wise root stages: all loops fused, split into blocks of `threads` threads;
- reductions without reuse: a cross-thread reduction (the inner part of the reduction axis bound
  to threadIdx.x), one block per output element group;
- reductions with reuse: `SSSRRSRS` tiling. The consumer (or the cache_write copy-out) takes the
  outer levels bound to blockIdx.x, vthread and threadIdx.x; the reduction is computed per thread
  into registers ("local") inside it, its reduction split in three; every input is staged through
  shared memory per outer reduction block, fetched cooperatively by the block's threads.
Every non-inlined stage stays at root: one kernel each.
"""

from __future__ import annotations

import math
from typing import Any

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


def gpu_tiling(b: Any, stage: Any, key: str) -> None:
    op = stage.op
    consumer = b.plan.fused_into.get(id(op))
    if consumer is not None:
        outer, inner = b.s[consumer], stage
    else:
        inner = b.rec.cache_write(stage, "local")
        outer = stage
    spatial = [_extent(iv) for iv in op.axis]
    reduce = [_extent(iv) for iv in op.reduce_axis]
    hint = {"spatial": spatial, "reduce": reduce, "op": op}
    tiles = [list(t) for t in b.d.tile(f"gtile:{key}", spatial, 5, hint)]
    _repair(tiles, 0, MAX_VTHREADS)  # [vthread, thread, S3, S4]
    _repair(tiles, 1, MAX_THREADS)
    for level in (3, 2):
        _repair(tiles, level, int(math.isqrt(MAX_LOCAL)))
    r_tiles = b.d.tile(f"grtile:{key}", reduce, 3, hint)  # [R1, R2]
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
    if r_levels and b.d.choice(f"shared:{key}", [True, False], hint):
        fetch_at = r_levels[-1][0]
        for t in {id(t.op): t for t in inner.op.input_tensors}.values():
            source = b.s[t]
            if source.attach_type == "inline":
                continue
            cache = b.rec.cache_read(source, "shared", [inner])
            b.rec.compute_at(cache, inner, fetch_at)
            fused = b.rec.fuse(cache, list(cache.leaf_iter_vars))
            _, tx = b.rec.split(cache, fused, threads)
            b.rec.bind(cache, tx, "threadIdx.x")
    unroll = b.d.choice(f"unroll:{key}", [0, 16, 64, 512], hint)
    if unroll:
        b.rec.pragma(inner, inner.leaf_iter_vars[0], "auto_unroll_max_step", unroll)


def _extent(iv: Any) -> int:
    value = getattr(iv.dom.extent, "value", None)
    return value if isinstance(value, int) else 1
