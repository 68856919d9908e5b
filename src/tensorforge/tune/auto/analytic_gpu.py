"""The first guess's GPU tiles (analytic.py asks): block and thread tiles for the sketch's
SSSRRSRS tiling, the reduction slices staged in shared memory, and the padding of their rows.

A product C[i, j] = A[i, k] B[k, j] tiles its last two axes, i over the rows of A and j over
the columns of B, as ops' hand GEMM schedule. A direct convolution Y[n, f, y, x] =
X[n, c, y + ry, x + rx] W[f, c, ry, rx] has its last two axes both over X: tiled that way a
block computes one filter, and every thread re-reads the input for each filter (ResNet's 3 x 3
layers 5-10x slower than the graph layer's own schedule). Its filters are the rows instead (the
axis that reads only the weights) and a run of whole output rows the columns; each slice of the
reduction takes a few channels under the whole window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tensorforge.te.expr import TensorRead
from tensorforge.te.visit import walk
from tensorforge.tune.auto.decisions import divisors
from tensorforge.tune.auto.extents import extent_of

K_SLICE = 16  # a product's shared slice of its reduction (split-K partials pad to it)
CONV_THREADS = 16  # threads along a block's output positions (x its filters' threads)
CONV_SLICE_TERMS = 64  # about this many terms (channels x window) per shared slice


def tiles(extents: Sequence[int], levels: int, hint: dict, machine: Any) -> list[list[int]]:
    """Per spatial axis [vthread, threads, S3, S4] (the first `levels - 1`)."""
    op = hint.get("op")
    row = filter_axis(op) if op is not None else None
    if row is not None:
        return conv_tiles(list(extents), levels, row, machine)
    return gemm_tiles(extents, levels, machine)


def gemm_tiles(extents: Sequence[int], levels: int, machine: Any) -> list[list[int]]:
    """Over the last two axes (the others one block each), as ops' hand GEMM schedule: a 16 x 16
    thread block, each thread 8 x 8 outputs in 2 x 2 pieces of 4 x 4 half a block tile apart
    (vthreads: a quarter warp's float4 shared loads cover 128 contiguous bytes), so a 128 x 128
    block tile: 64 accumulators (a quarter of the registers), 2 x 128 x k-slice floats of shared
    memory. Smaller tiles where 128 x 128 ones would leave SMs idle, and on axes too short."""
    n = len(extents)
    lead = math.prod(extents[: max(0, n - 2)])
    inner = list(range(max(0, n - 2), n))
    budget = 1 << max(0, (machine.registers // 3).bit_length() - 1)
    # (vthread, threads, S4) per axis, largest first: 128, 64, 32, 16 outputs a block row
    shapes = [(2, 16, 4), (1, 16, 4), (1, 16, 2), (1, 16, 1), (1, 8, 1)]
    best = None
    for shape in shapes:
        v, t, r = shape
        if (v * r) ** len(inner) > budget:
            continue
        per_axis = [_axis(extents[a], shape) for a in inner]
        blocks = lead * math.prod(-(-extents[a] // math.prod(f)) for a, f in zip(inner, per_axis))
        best = per_axis
        if blocks >= machine.cores:  # enough blocks for every SM
            break
    out = [[1, 1, 1, 1] for _ in range(n)]
    for a, factors in zip(inner, best or []):
        out[a] = factors
    return [f[: levels - 1] for f in out]


def _axis(extent: int, shape: tuple[int, int, int]) -> list[int]:
    """[vthread, threads, 1, S4] for one axis: the shape where the axis holds it, shrunk (S4,
    then vthread, then threads) where it is shorter."""
    v, t, r = shape
    while v * t * r > extent and r > 1:
        r //= 2
    while v * t * r > extent and v > 1:
        v //= 2
    while v * t * r > extent and t > 1:
        t //= 2
    return [v, t, 1, r]


def filter_axis(op: Any) -> int | None:
    """The axis of a convolution-like op's filters: its last two axes index one input (the
    image, through windows), and an earlier axis of extent > 1 indexes only another (the
    weights). None for anything else (a product's last two axes index different inputs)."""
    if len(op.axis) < 3 or len(op.reduce_axis) < 2:
        return None
    reads = _reads(op)
    readers = [
        {id(r.tensor) for r in reads if any(_uses(i, iv.var) for i in r.indices)} for iv in op.axis
    ]
    image = readers[-1]
    if len(image) != 1 or readers[-2] != image:
        return None
    for a in range(len(op.axis) - 2):
        if readers[a] and not readers[a] & image and extent_of(op.axis[a]) > 1:
            return a
    return None


def window_axes(op: Any) -> list[int]:
    """The reduction axes that slide a window: read in an index beside a spatial axis
    (`X[n, c, y + ry, x + rx]`: ry and rx, not c)."""
    spatial = [iv.var for iv in op.axis]
    reads = _reads(op)
    out = []
    for a, iv in enumerate(op.reduce_axis):
        for read in reads:
            if any(_uses(i, iv.var) and any(_uses(i, v) for v in spatial) for i in read.indices):
                out.append(a)
                break
    return out


def conv_tiles(extents: list[int], levels: int, row: int, machine: Any) -> list[list[int]]:
    """Filters (axis `row`) in 4s a thread, up to 16 threads; output positions a run of whole
    rows: a thread 4 (else 2, 1) adjacent columns, up to CONV_THREADS threads over the columns
    and rows of the tile, tile sides that divide the map (no guarded tail). The filters' threads
    halve until the blocks cover the SMs: H200, batch 1, against blocks of at least 64 threads
    (fewer blocks) 23.0 / 32.2 / 57.9 / 111.2 us at ResNet's 56, 28, 14 and 7 against 20.9 /
    42.1 / 55.6 / 166.5; the old GEMM tiles 86.5 / 151.7 / 246.4 / 421.8."""
    height, width = extents[-2], extents[-1]
    sx = next(v for v in (4, 2, 1) if width % v == 0)
    tx = max(d for d in divisors(width // sx) if d <= CONV_THREADS)
    ty = max(d for d in divisors(height) if d * tx <= CONV_THREADS)
    others = math.prod(e for a, e in enumerate(extents[:-2]) if a != row)
    positions = (height // ty) * (width // (tx * sx))
    filters = extents[row]
    for threads in (16, 8, 4, 2, 1):
        f_tile = _axis(filters, (1, threads, 4))
        if others * positions * -(-filters // math.prod(f_tile)) >= machine.cores:
            break
    out = [[1, 1, 1, 1] for _ in extents]
    out[row] = f_tile
    out[-2] = [1, ty, 1, 1]
    out[-1] = [1, tx, 1, sx]
    return [f[: levels - 1] for f in out]


def reduce_tiles(extents: Sequence[int], levels: int, hint: dict) -> list[list[int]]:
    """The innermost reduction axis in slices of 16 (8 when 16 does not divide it, so the
    float4 fetches stay legal), the others one at a time; the slices of every input fit twice
    (double buffering) in the shared memory of a block. A convolution's slice is a few
    channels (a power of two dividing them, about CONV_SLICE_TERMS terms) under its whole
    window (`window_axes`, in whatever order the reduction lists them): a window tap a slice
    made 3-term steps, a barrier each."""
    out = [[1] * (levels - 1) for _ in extents]
    op = hint.get("op")
    if op is not None and len(extents) >= 2 and filter_axis(op) is not None:
        windows = window_axes(op)
        rest = [a for a in range(len(extents)) if a not in windows]
        if windows and rest:
            channels = max(rest, key=lambda a: extents[a])  # (rc, ry, rx) or any other order
            window = math.prod(extents[a] for a in windows)
            step = 1
            while step * 2 * window <= CONV_SLICE_TERMS and extents[channels] % (step * 2) == 0:
                step *= 2
            out[channels][0] = step
            for a in windows:
                out[a][0] = extents[a]
            return out
    if extents:
        e = extents[-1]
        out[-1][0] = next((k for k in (K_SLICE, 8, 4) if e % k == 0), min(e, K_SLICE))
    return out


def shared_pad(options: Sequence[Any], hint: dict) -> Any:
    """Pad the rows of a shared tile whose last dimension is a reduction slice (A[i, k]): the
    two thread rows of a warp read rows 4 apart, which with a 16- or 8-float stride fall in one
    bank; a stride of 32k + 4 spreads them."""
    op, tensor = hint.get("op"), hint.get("tensor")
    if op is None or tensor is None:
        return options[0]
    reduce_vars = {id(iv.var) for iv in op.reduce_axis}
    reads = _reads(op)
    reads = [r for r in reads if r.tensor is tensor]
    if reads and all(id(r.indices[-1]) in reduce_vars for r in reads) and 4 in options:
        return 4
    return options[0]


def _reads(op: Any) -> list:
    return [n for body in op.body for n in walk(body) if isinstance(n, TensorRead)]


def _uses(index: Any, var: Any) -> bool:
    return any(n is var for n in walk(index))
