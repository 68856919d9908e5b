"""The CPU schedules of the graph layer's products (graph/schedules.py dispatches to them):
matmul's register-tiled panels (ops/matmul's micro-kernel shape; the next weight panel
prefetched where L2 holds it) and direct conv2d (ops/conv2d's register tiles, or vectors along
the filters), each with the kernel's element-wise epilogue applied to a tile as it is stored.
"""

from __future__ import annotations

import os

from tensorforge.graph.lower_linalg import matmul_tiles
from tensorforge.graph.values import numel, opmath_dtype
from tensorforge.ops.conv2d import filter_block, register_tile

PARALLEL_MIN_ELEMENTS = 1 << 14  # below this, one thread: waking the pool costs more
PANEL_PREFETCH_BYTES = 1 << 20  # two weight panels and the left matrix: L2 holds them


def _static_numel(tensor) -> int | None:
    sizes = [getattr(e, "value", None) for e in tensor.shape]
    return None if any(not isinstance(v, int) for v in sizes) else numel(sizes)


def worth_threads(tensor) -> bool:
    """Whether a kernel writing `tensor` is worth the thread pool (or of a run-time size)."""
    size = _static_numel(tensor)
    return size is None or size >= PARALLEL_MIN_ELEMENTS


def schedule_matmul(s, out, anchor, target) -> None:
    """ops/matmul's panel schedule: nr-column panels, mr-row tiles accumulated in registers over
    all of k, the epilogue applied to each tile as it is stored."""
    (C,) = anchor.info["stages"]
    mr, nr = anchor.info.get("mr"), anchor.info.get("nr")
    if mr is None:
        mr, nr = matmul_tiles(target, opmath_dtype(out.dtype))
    *batch, i, j = s[out].op.axis
    n = anchor.info["shape"][-2]
    if isinstance(n, int):
        mr = max(1, min(mr, n))
    jo, ji = s[out].split(j, factor=nr)
    # rows known only at run time (a dynamic batch): full row tiles in a loop of their own,
    # unguarded, and the last partial tile after it; guarded, every FMA row of every tile
    # tested its row against the count (MLP b64 under dynamic=True 2.6x slower than static)
    if isinstance(n, int):
        io, ii = s[out].split(i, factor=mr)
    else:  # (a static kernel's calls are recorded as a trace, whose split has no tail mode)
        io, ii = s[out].split(i, factor=mr, tail="peel")
    m = anchor.info["shape"][-1]
    rows_outer = isinstance(m, int) and m <= 4 * nr
    if rows_outer:
        # a few column panels (a late conv layer's 7 x 7 outputs): row tiles outside, so the
        # left matrix (its weights, megabytes) streams once and the panels stay in cache
        s[out].reorder(*batch, io, jo, ii, ji)
    else:
        s[out].reorder(*batch, jo, io, ii, ji)
    s[out].vectorize(ji)
    # NOTE: the column panels are not fused with the batch loops: fused, a partial last panel
    # puts its guard on every load and store of every panel (a 25x slower conv as im2col GEMM
    # at 14 x 14 outputs); unfused, the split peels that panel into a loop of its own
    shape = anchor.info["shape"]
    real_batch = [ax for ax, size in zip(batch, shape) if not (isinstance(size, int) and size == 1)]
    outer = real_batch[0] if real_batch else (io if rows_outer else jo)
    if worth_threads(out) or anchor.info.get("k", 1) >= 256:
        s[out].parallel(outer)
    s[C].compute_at(s[out], jo if rows_outer else io)
    *cb, ci, cj = s[C].op.axis
    (ck,) = s[C].op.reduce_axis
    ko, ki = s[C].split(ck, factor=4)
    s[C].reorder(*cb, ko, ki, ci, cj)
    s[C].unroll(ki)
    s[C].unroll(ci)
    s[C].vectorize(cj)
    panels = anchor.info.get("panels")
    packed = _read_of(C, panels) if panels is not None and not rows_outer else None
    k = anchor.info.get("k")
    if packed is not None and _prefetch_next_panel(anchor.info, packed):
        # the next column panel: [panels, k, nr] is contiguous, so the k rows one panel
        # (k // 4 iterations of ko) ahead are the same rows of the next panel
        s[C].prefetch(packed, ko, -(-k // 4))


def _prefetch_next_panel(info, packed) -> bool:
    """Whether the row tiles of a weight panel prefetch the next panel, as they walk k: where
    there are several row tiles (one alone streams each panel once, which the hardware
    prefetcher follows: MLP at batch 1 ran 5% slower with it) and two panels and the left
    matrix fit in L2 (fc2 of GPT-2, k = 3072, ran 3% slower). GPT-2 block at 1 thread, the same
    memory, the two codes interleaved, min thread time of 30 (load ~0.9): qkv 2218 -> 2029 us,
    proj 754 -> 710, fc1 3024 -> 2808; whole block 1.01-1.03x Inductor -> 1.09-1.11x, MLP at
    batch 64 1.12-1.14x -> 1.19x (benchmarks/torch_models.py, separate runs)."""
    if os.environ.get("TENSORFORGE_PANEL_PREFETCH", "1") in ("0", ""):
        return False
    k, n, mr = info.get("k"), info["shape"][-2], info.get("mr")
    nr = getattr(packed.shape[-1], "value", None)
    if not all(isinstance(v, int) for v in (k, nr, mr)):
        return False
    if not isinstance(n, int):
        # rows known at run time (a sequence under dynamic=True): where the two panels take
        # at most half of L2's share, the left matrix's rows the rest (GPT-2's k = 768 layers
        # prefetch, fc2's k = 3072 does not, as at 128 rows statically). GPT-2 block seq 128,
        # dynamic, 1 thread: qkv 2050-2094 -> 1912-1924 us (static 1802-1932), fc1 2822-2940
        # -> 2725-2822 (static 2505-2640)
        return 2 * (4 * 2 * k * nr) <= PANEL_PREFETCH_BYTES
    if n <= mr:
        return False
    return 4 * (2 * k * nr + n * k) <= PANEL_PREFETCH_BYTES


def _read_of(C, name: str):
    """The tensor named `name` that stage C reads (the matmul's packed weight panels,
    [panels, k, nr], whose buffer the lowering names in its anchor's info); None if C does not."""
    from tensorforge.te.expr import TensorRead
    from tensorforge.te.visit import walk

    for node in walk(C.op.body[0]):
        if isinstance(node, TensorRead) and node.tensor.op.name == name:
            return node.tensor
    return None


def conv_keeps_rules(info) -> bool:
    """Whether a direct convolution keeps this module's schedule under schedule="auto": a
    depthwise one over channel blocks (the first guess would not place its pack stage), and
    2-d vectors along the filters over a window of 25 taps or more. ResNet's 7 x 7 stem (3 ->
    64, stride 2, 224 pixels), 1 thread, first guess -> rules, same process: 4.36 -> 2.83 ms
    (eager 3.10), AVX2 code 5.83 -> 2.98 (eager 5.20; load 4-5). 3 x 3 ones of few channels
    keep the first guess (3 -> 16 at 224: 0.30 against 0.46 ms; 8 -> 32 at 64: 0.29 against
    0.57), as do 3-d ones (the video stem, 3 x 7 x 7: 2.63 -> 3.30). Weights packed at run
    time (a training graph's) keep the rules: ResNet-18's 3 x 3 layers at batch 1, 1 thread,
    the convolution without its packing, first guess -> rules: 64 at 56 2.25 -> 2.14 ms,
    256 at 14 2.15 -> 2.04, 128 at 28 2.18 -> 2.12 (load 0.4)."""
    if info.get("pack") is not None:
        return True
    if info.get("packed_at_run_time"):
        return True
    return bool(info.get("lanes")) and info.get("taps", 0) >= 25


def schedule_conv2d(s, out, anchor, target) -> None:
    """ops/conv2d's direct schedule: an f_block x (x_vectors vectors) tile of outputs in
    registers, output rows in parallel."""
    if anchor.info.get("pack") is not None:
        _depthwise_channel_vectors(s, out, anchor, target)
        return
    if anchor.info.get("lanes"):
        _conv2d_filter_vectors(s, out, anchor, target)
        return
    (conv,) = anchor.info["stages"]
    lanes = target.vector_lanes(opmath_dtype(out.dtype))
    _, F, _, OW = anchor.info["shape"]
    row_vectors = -(-OW // lanes) if isinstance(OW, int) else 3
    x_vectors = row_vectors if row_vectors <= 4 else 3
    most = filter_block(x_vectors, target)
    f_block = next((b for b in (8, 4, 2, 1) if b <= most and isinstance(F, int) and F % b == 0), 1)
    b, y = register_tile(s, out, conv, f_block, lanes, x_vectors)
    s[out].parallel(s[out].fuse(b, y))


def _conv2d_filter_vectors(s, out, anchor, target) -> None:
    """A direct convolution with vectors along the filters (lower_conv's packed weights):
    a tile of `x_block` output columns x `f_vectors` vectors of filters accumulated in
    registers over the whole reduction (6 x 2: 12 accumulators, a broadcast and two weight
    vectors in AVX2's 16 registers; 7 x 2 spills, 1.6x slower); the epilogue stores each tile.
    (Under the default `schedule="auto"` static shapes take the first guess instead.)"""
    (conv,) = anchor.info["stages"]
    lanes = anchor.info["lanes"]
    _, F, _, OW = anchor.info["shape"]
    f_vectors = 2 if F % (2 * lanes) == 0 else 1
    x_block = _conv_x_block(OW, 6 if f_vectors == 2 else 12)
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=lanes * f_vectors)
    fio, fii = s[out].split(fi, factor=lanes)
    xo, xi = s[out].split(x, factor=x_block)
    s[out].reorder(b, fo, y, xo, xi, fio, fii)
    s[out].unroll(fio)
    s[out].vectorize(fii)
    rows = s[out].fuse(b, fo, y)
    s[out].parallel(rows)
    s[conv].compute_at(s[out], xo)
    cb, cf, cy, cx, cl = s[conv].op.axis
    reduce = s[conv].op.reduce_axis  # (c, ky, kx); a 3-d convolution's (c, kz, ky, kx)
    s[conv].reorder(cb, cy, *reduce, cx, cf, cl)
    s[conv].unroll(cx)
    s[conv].unroll(cf)
    s[conv].vectorize(cl)


def _depthwise_channel_vectors(s, out, anchor, target) -> None:
    """A depthwise convolution over channel blocks (lower_conv_depthwise): per block of `lanes`
    channels (in parallel), its padded input planes packed by a transposing copy in lanes x
    lanes tiles (a tile's rows are one cache line each: the planes, a power-of-two bytes apart
    at 28 x 28 padded to 32 x 32, alias in L1 when read lane by lane), then tiles of `x_block`
    output columns x one vector of channels accumulated in registers over the window, its row
    of taps unrolled (the inputs a tile's columns share loaded once), each tile stored by the
    epilogue in vectors along the row."""
    (conv,) = anchor.info["stages"]
    packed, lanes = anchor.info["pack"], anchor.info["lanes"]
    OW = anchor.info["shape"][3]
    # output columns a tile: AVX-512's 32 registers hold 14 accumulators beside a row of
    # inputs (384 channels 7 x 7 at 14 pixels, 1 thread: 157 -> 152 us with 14 against 12)
    x_block = _conv_x_block(OW, 14 if target.vector_bits >= 512 else 12)
    b, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=lanes)
    xo, xi = s[out].split(x, factor=x_block)
    s[out].reorder(b, fo, y, xo, fi, xi)
    s[out].unroll(fi)
    s[out].vectorize(xi)
    blocks = s[out].fuse(b, fo)
    if worth_threads(out):
        s[out].parallel(blocks)
    s[conv].compute_at(s[out], xo)
    cb, cf, cy, cx, cl = s[conv].op.axis
    ry, rx = s[conv].op.reduce_axis
    s[conv].reorder(cb, cf, cy, ry, rx, cx, cl)
    s[conv].unroll(cx)
    s[conv].vectorize(cl)
    if rx.dom.extent.value <= 7:
        s[conv].unroll(rx)
    s[packed].compute_at(s[out], blocks)
    *_, px, lane = s[packed].op.axis
    pxo, pxi = s[packed].split(px, factor=lanes)
    s[packed].reorder(pxo, lane, pxi)
    s[packed].unroll(lane)
    s[packed].unroll(pxi)


def _conv_x_block(width, most: int) -> int:
    """Output columns per tile: at most `most` (the accumulators fill the vector registers),
    a divisor of the row where one is near that (no partial tile), else `most - 1`."""
    if not isinstance(width, int):
        return most - 1
    if width <= most:
        return width
    for block in range(most, most // 2, -1):
        if width % block == 0:
            return block
    return most - 1
