"""CUDA schedules for the graph layer's kernels: the anchor picks the schedule, the element-wise
epilogue is the stage it is computed in.

- matmul / bmm / linear (and conv2d, an implicit GEMM over its filters x output pixels): each
  thread keeps a `vi` x `vj` tile of the product in registers (rows read once per step and
  broadcast across the warp, `vj` contiguous columns as one vector load). Where the outputs are
  too few to fill the GPU (small batches, late convolution layers), the reduction is split
  across the block's `threadIdx.z` (split-K): each slice accumulates its partial tile in
  registers, writes it to shared memory, and the block sums the slices while it applies the
  epilogue, one output per thread, coalesced.
- softmax / log-softmax / layer norm, reductions along rows: a block per row, or blocks along
  rows split in chunks (schedules_cuda_rows.py).
- everything else: a thread per output element (`schedule_simple`), vectorized where the
  output's rows are whole vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge import te
from tensorforge.graph.schedules_cuda_rows import (
    is_block_reduction,
    is_row_reduction,
    schedule_block_reduction,
    schedule_rows,
    schedule_split_rows,
    static_extent,
)
from tensorforge.graph.schedules_tensor_core import schedule_tensor_core
from tensorforge.graph.values import is_static, numel
from tensorforge.ops.cuda import bind_elementwise_cuda

THREADS = 256  # threads per block
# split the reduction until this many threads share the work (H100, measured over whole models:
# GPT-2 block 0.276 ms at 2^16, 0.156 at 2^17, 0.154 at 2^18; ResNet-18's convolutions 0.520 ms
# at 2^16, 0.548 at 2^17, 0.861 at 2^18)
FILL_THREADS = 1 << 17
CONV_FILL_THREADS = 1 << 16
MIN_K_SLICE = 16  # ... while each slice still reduces at least this many terms
STAGED_GEMM_FLOP = 3e9  # products from here on: shared-memory block tiles (wants_staged_gemm)
UNROLL_K = 4  # reduction steps unrolled in a thread's tile loop

SOURCES = {
    "gemm": "cuda gemm: register tiles",
    "gemm_split": "cuda gemm: register tiles, split-K",
    "rows": "cuda row operator: a block per row",
    "split_rows": "cuda row operator: chunk statistics combined per block",
    "block_reduction": "cuda reduction: a block per output",
    "simple": "cuda: a thread per output",
    "elementwise": "cuda element-wise: a vector per thread",
}


def schedule_cuda(s, out, anchor) -> str:
    """Apply the CUDA schedule of a kernel (output stage `out`, anchor or None) to `s`; the
    name of the rule used."""
    kind = anchor.kind if anchor is not None else None
    if kind == "matmul" and "tensor_core" in anchor.info:
        return schedule_tensor_core(s, out, anchor)
    if kind == "matmul" and is_static(anchor.info["shape"]) and len(anchor.info["stages"]) == 1:
        return _gemm(s, out, anchor)
    if kind == "conv2d" and is_static(anchor.info["shape"]):
        return _conv(s, out, anchor)
    if anchor is not None and anchor.info.get("row_block"):
        schedule_split_rows(s, out, anchor)
        return SOURCES["split_rows"]
    if is_block_reduction(out, anchor):
        schedule_block_reduction(s, out, anchor)
        return SOURCES["block_reduction"]
    if kind in ("softmax", "layer_norm") and s[out].op.axis or is_row_reduction(out, anchor):
        schedule_rows(s, out, anchor)
        return SOURCES["rows"]
    if anchor is None and _vector_width(out) > 1:
        _elementwise(s, out, _vector_width(out))
        return SOURCES["elementwise"]
    schedule_simple(s, out, anchor)
    return SOURCES["simple"]


def _vector_width(out) -> int:
    """The lanes of a 16-byte store where the output's rows are whole vectors of them: 4 of
    32-bit values (float4), 8 of float16 or bfloat16 (a uint4 of packed pairs, each lane
    computed in float32); 1 otherwise."""
    last = getattr(out.shape[-1], "value", None) if out.shape else None
    lanes = {"float32": 4, "int32": 4, "float16": 8, "bfloat16": 8}.get(out.dtype, 1)
    return lanes if isinstance(last, int) and last % lanes == 0 else 1


MAX_GRID_Y = 65535
MIN_ROW_VECTORS = 64  # block rows of 2 warps or more (32 resident blocks of one warp would
# leave an H100 SM half its warps): rows of fewer vectors, or whose vectors no count from 64 to
# THREADS divides (a prime past 256), are flattened together


def _elementwise(s, out, width: int) -> None:
    """A thread per `width` contiguous outputs: one vector store, the loads as the inputs'
    layout allows (a vector where they are contiguous and aligned too).

    Where the rows are long (MIN_ROW_VECTORS vectors or more) and few enough for the grid's
    y, a block row per row: the leading indices are then the block's, so the index arithmetic
    of a gather (im2col's (n, c, ky, kx) per column row) is done once a block instead of once
    a thread (H100, ResNet-18's 64-channel im2col at batch 16: see the note of session 14);
    else the outputs flattened, `THREADS` a block."""
    *lead, last = s[out].op.axis
    extents = [getattr(a.dom.extent, "value", None) for a in s[out].op.axis]
    static = all(isinstance(e, int) for e in extents)
    vectors = -(-extents[-1] // width) if static else 0
    rows = numel(extents[:-1]) if lead and static else 0
    # threads a block: the most up to THREADS that divide a row's vectors (a partial block
    # would guard each lane, and its stores would no longer be vectors)
    threads = max((t for t in range(MIN_ROW_VECTORS, THREADS + 1) if vectors % t == 0), default=0)
    if not (threads and 0 < rows <= MAX_GRID_Y):
        bind_elementwise_cuda(s, out, THREADS, width)
        return
    row = s[out].fuse(*lead) if len(lead) > 1 else lead[0]
    rest, vec = s[out].split(last, factor=width)
    block, thread = s[out].split(rest, factor=threads)
    s[out].bind(row, te.thread_axis("blockIdx.y"))
    s[out].bind(block, te.thread_axis("blockIdx.x"))
    s[out].bind(thread, te.thread_axis("threadIdx.x"))
    s[out].vectorize(vec)


def schedule_simple(s, out, anchor) -> None:
    """Each thread computes one output element; the anchor's stages at that thread."""
    axes = s[out].op.axis
    if not axes:
        return
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    block, thread = s[out].split(fused, factor=THREADS)
    s[out].bind(block, te.thread_axis("blockIdx.x"))
    s[out].bind(thread, te.thread_axis("threadIdx.x"))
    if anchor is not None:
        for stage in reversed(anchor.info["stages"]):
            s[stage].compute_at(s[out], thread)


# -- matrix products ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmPlan:
    """A block of `tx` x `ty` x `kz` threads; thread (x, y, z) accumulates rows
    [y*vi, y*vi + vi) x columns [x*vj, x*vj + vj) of the block's tile over the z-th of `kz`
    interleaved slices of the reduction."""

    vi: int
    vj: int
    tx: int
    ty: int
    kz: int

    @property
    def rows(self) -> int:
        return self.vi * self.ty

    @property
    def cols(self) -> int:
        return self.vj * self.tx


def _pow2_at_most(x: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(x, cap):
        p *= 2
    return p


def gemm_plan(batch: int, n: int, m: int, k: int, fill: int | None = None) -> GemmPlan:
    """Tiles for a (batch x) n x m product over k terms: 4 x 4 registers a thread where the
    matrix is that large, then as many reduction slices as it takes to fill the GPU."""
    vj = 4 if m >= 16 else (2 if m >= 4 else 1)
    vi = 4 if n >= 16 else (2 if n >= 4 else 1)
    col_tiles, row_tiles = -(-m // vj), -(-n // vi)
    tiles = batch * col_tiles * row_tiles
    fill = FILL_THREADS if fill is None else fill
    kz = 1
    while kz < 32 and tiles * kz < fill and k // (kz * 2) >= MIN_K_SLICE:
        kz *= 2
    per_block = THREADS // kz
    tx = _pow2_at_most(col_tiles, min(32, per_block))
    ty = _pow2_at_most(row_tiles, per_block // tx)
    return GemmPlan(vi, vj, tx, ty, kz)


def wants_staged_gemm(anchor, target) -> bool:
    """Whether a product is large enough for the auto-scheduler's GPU GEMM (block tiles of up
    to 128 x 128 staged through shared memory, as ops' hand schedule; schedules.py takes its
    first guess) rather than these register tiles: STAGED_GEMM_FLOP or more, and 64 x 64
    tiles enough to fill the SMs; always a split-K convolution's partial products (made for
    those tiles: lower_conv_gemm). On an H200, an MLP (768 -> 3072 -> 768) at 2048 rows: 1.141
    ms with register tiles, 0.545 with staged tiles (eager torch, cuBLAS: 0.50); at 512 rows
    (2.4 GFLOP a product) 0.185 against 0.270."""
    if anchor is None or anchor.kind != "matmul" or not is_static(anchor.info["shape"]):
        return False
    if "tensor_core" in anchor.info:  # lower_tensor_core's: schedules_tensor_core
        return False
    if anchor.info.get("split_k"):  # split-K partial products: made for these tiles
        return True
    *batch, n, m = anchor.info["shape"]
    (k,) = [getattr(r.dom.extent, "value", None) for r in anchor.info["stages"][0].op.reduce_axis]
    if not isinstance(k, int):  # a sum over a size known at run time (a weight's gradient)
        return False
    flop = 2 * numel(batch) * n * m * k
    return flop >= STAGED_GEMM_FLOP and numel(batch) * (n // 64) * (m // 64) >= target.sm_count


def _gemm(s, out, anchor) -> str:
    """The product C[*b, i, j] = sum_k A * B, its epilogue the output stage."""
    (C,) = anchor.info["stages"]
    *batch, n, m = anchor.info["shape"]
    (k,) = s[C].op.reduce_axis
    # a sum over a run-time size (a weight's gradient under dynamic shapes) is not split
    # across threads: that needs its extent
    plan = gemm_plan(numel(batch), n, m, getattr(k.dom.extent, "value", 1))
    *b_axes, i, j = s[out].op.axis
    return _tiled_product(s, out, C, b_axes, [i], [j], [(n, plan.rows)], [(m, plan.cols)], plan)


def _tiled_product(s, out, C, batch_axes, row_axes, col_axes, row_tiles, col_tiles, plan):
    """Schedule reduction stage C (its data axes those of `out`) under output stage `out`:
    `row_axes` / `col_axes` (of out) are tiled by `row_tiles` / `col_tiles` ((extent, tile)
    per axis; their product is plan.rows / plan.cols); the tiles of the innermost row and column
    axes split across threadIdx.y / threadIdx.x, `vi` x `vj` registers each."""
    axes = list(s[out].op.axis)
    positions = {ax: d for d, ax in enumerate(axes)}
    tiles = {}
    for ax, (_, tile) in zip(row_axes + col_axes, row_tiles + col_tiles):
        tiles[ax] = tile
    outer, inner = [], []
    for ax in axes:
        if ax in tiles:
            o, i_ = s[out].split(ax, factor=tiles[ax])
            outer.append(o)
            inner.append(i_)
        else:
            outer.append(ax)
    s[out].reorder(*outer, *inner)
    block = _bind_blocks(s, out, outer, len(row_axes), len(col_axes))
    data = [positions[ax] for ax in row_axes + col_axes]
    if plan.kz == 1:
        # the output's own inner tile: rows over threadIdx.y, columns over threadIdx.x
        *ri, r_last = inner[: len(row_axes)]
        *cl, c_last = inner[len(row_axes) :]
        ty_ax, vi_ax = s[out].split(r_last, factor=plan.vi)
        tx_ax, vj_ax = s[out].split(c_last, factor=plan.vj)
        s[out].reorder(*ri, *cl, ty_ax, tx_ax, vi_ax, vj_ax)
        for extra in ri + cl:
            s[out].unroll(extra)
        s[out].bind(ty_ax, te.thread_axis("threadIdx.y"))
        s[out].bind(tx_ax, te.thread_axis("threadIdx.x"))
        s[out].unroll(vi_ax)
        s[out].unroll(vj_ax)
        s[C].set_scope("local")
        s[C].compute_at(s[out], tx_ax)
        _register_tile(s, C, [s[C].op.axis[d] for d in data], plan)
        return SOURCES["gemm"]
    # split-K: partial tiles CF[kz, ...] in shared memory, summed per output by the block
    k = s[C].op.reduce_axis[0]
    _, kz = s[C].split(k, factor=plan.kz)
    CF = s.rfactor(C, kz, factor_axis=0)
    CL = s.cache_write(CF, "local")
    s[CF].set_scope("shared")
    s[CF].compute_at(s[out], block)
    cf_axes = s[CF].op.axis
    z_ax, cf_data = cf_axes[0], [cf_axes[1 + d] for d in data]
    rows_cf, cols_cf = cf_data[: len(row_axes)], cf_data[len(row_axes) :]
    *rr, r_last = rows_cf
    *cc, c_last = cols_cf
    ty_ax, vi_ax = s[CF].split(r_last, factor=plan.vi)
    tx_ax, vj_ax = s[CF].split(c_last, factor=plan.vj)
    s[CF].reorder(z_ax, *rr, *cc, ty_ax, tx_ax, vi_ax, vj_ax)
    s[CF].bind(z_ax, te.thread_axis("threadIdx.z"))
    s[CF].bind(ty_ax, te.thread_axis("threadIdx.y"))
    s[CF].bind(tx_ax, te.thread_axis("threadIdx.x"))
    for extra in rr + cc:
        s[CF].unroll(extra)
    s[CF].unroll(vi_ax)
    s[CF].vectorize(vj_ax) if plan.vj in (2, 4) else s[CF].unroll(vj_ax)
    s[CL].compute_at(s[CF], tx_ax)
    cl_axes = s[CL].op.axis
    _register_tile(s, CL, [cl_axes[1 + d] for d in data], plan)
    # the epilogue: the block's tile, one element per thread per step, summing the slices
    tile = s[out].fuse(*inner) if len(inner) > 1 else inner[0]
    t_x = _spread(s, out, tile, plan, plan.rows * plan.cols)
    s[C].set_scope("local")
    s[C].compute_at(s[out], t_x)
    return SOURCES["gemm_split"]


def _spread(s, out, tile, plan, elements: int):
    """The block's `elements` outputs (fused axis `tile`) over its threads, consecutive
    elements on consecutive threads; never more threads than elements (a split past the tile
    would widen the region the shared partial tiles are computed over)."""
    threads = min(plan.tx * plan.ty * plan.kz, elements)
    if elements % threads and elements % plan.tx == 0:  # threads that divide the tile (a split
        # with a tail would widen the region too: ResNet-18's 14 x 14 convolution at batch 4,
        # 4 x 7 x 14 outputs over 112 threads, computed 5 filters' partials for 4, then 8)
        per_x = elements // plan.tx
        threads = plan.tx * max(d for d in range(1, threads // plan.tx + 1) if per_x % d == 0)
    rest, t = s[out].split(tile, factor=threads)
    t_zy, t_x = s[out].split(t, factor=plan.tx)
    t_z, t_y = s[out].split(t_zy, factor=plan.ty)
    s[out].reorder(rest, t_z, t_y, t_x)
    s[out].bind(t_z, te.thread_axis("threadIdx.z"))
    s[out].bind(t_y, te.thread_axis("threadIdx.y"))
    s[out].bind(t_x, te.thread_axis("threadIdx.x"))
    return t_x


def _bind_blocks(s, out, outer, n_rows: int, n_cols: int):
    """Column tiles on blockIdx.x, row tiles on blockIdx.y, the rest (batch) on blockIdx.z:
    each index stays a plain loop variable, so the tile guards simplify away. Returns the
    innermost block axis (where the block's shared stages are computed)."""
    k = len(outer) - n_rows - n_cols
    batch, rows, cols = outer[:k], outer[k : k + n_rows], outer[k + n_rows :]
    groups = [(batch, "blockIdx.z"), (rows, "blockIdx.y"), (cols, "blockIdx.x")]
    last = None
    for axes, tag in groups:
        if axes:
            last = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
            s[out].bind(last, te.thread_axis(tag))
    return last


def _register_tile(s, stage, data_axes, plan) -> None:
    """The accumulating stage at a thread: the reduction outside, the tile's axes unrolled
    inside (the last, contiguous one as a vector)."""
    reduce_axes = list(s[stage].op.reduce_axis)
    others = [ax for ax in s[stage].op.axis if ax not in data_axes]
    s[stage].reorder(*others, *reduce_axes, *data_axes)
    _unroll_reduction(s, stage, reduce_axes[-1])
    for ax in data_axes[:-1]:
        s[stage].unroll(ax)
    last = data_axes[-1]
    if plan.vj in (2, 4):
        s[stage].vectorize(last)
    else:
        s[stage].unroll(last)


# -- convolution --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConvPlan:
    """`plan` over (filters x output positions); a block's positions are `y_tile` rows of
    `x_tile` columns, `x_threads` threads along a row (`plan.vj` positions each)."""

    plan: GemmPlan
    x_threads: int
    y_tile: int
    x_tile: int


def conv_plan(N: int, F: int, OH: int, OW: int, C: int, window: int) -> ConvPlan:
    """A GEMM plan for F x (OH * OW) outputs over C * window terms, fitted to whole rows:
    `vj` positions a thread where they divide the row (4, else 7 for ResNet's 7 x 7 and 14 x 14
    maps, else 2), whole rows in a block where they are short."""
    plan = gemm_plan(N, F, OH * OW, C * window, CONV_FILL_THREADS)
    vj = next(v for v in (4, 7, 2, 1) if OW % v == 0 and (v <= plan.vj or v == 7))
    kz = plan.kz
    while kz > 1 and C // kz < 2:
        kz //= 2
    limit = THREADS // kz  # threads of one reduction slice: (y, x) positions x filter groups
    cols = max(plan.cols, vj)
    if -(-OW // vj) <= min(cols // vj, limit):
        x_threads, x_tile = -(-OW // vj), OW
    else:
        x_threads = max(1, min(cols // vj, limit))
        x_tile = vj * x_threads
    y_tile = max(1, min(OH, cols // x_tile, limit // x_threads))
    y_tile = -(-OH // -(-OH // y_tile))  # as many blocks, rows shared evenly (14: 7 + 7, not 9 + 5)
    tx = y_tile * x_threads
    ty = _pow2_at_most(-(-F // plan.vi), max(1, limit // tx))
    return ConvPlan(GemmPlan(plan.vi, vj, tx, ty, kz), x_threads, y_tile, x_tile)


def _conv(s, out, anchor) -> str:
    """conv[n, f, y, x] = sum over (c, ky, kx): filters are the rows, output positions (a run of
    whole rows of y, a tile of x) the columns; split-K over the input channels."""
    (conv,) = anchor.info["stages"]
    N, F, OH, OW = anchor.info["shape"]
    rc, *window = s[conv].op.reduce_axis
    cp = conv_plan(N, F, OH, OW, rc.dom.extent.value, numel([r.dom.extent.value for r in window]))
    return _conv_tiles(s, out, conv, cp.plan, cp.x_threads, cp.y_tile, cp.x_tile)


def _conv_tiles(s, out, conv, plan, x_threads, y_tile, x_tile) -> str:
    n, f, y, x = s[out].op.axis
    fo, fi = s[out].split(f, factor=plan.rows)
    yo, yi = s[out].split(y, factor=y_tile)
    xo, xi = s[out].split(x, factor=x_tile)
    s[out].reorder(n, fo, yo, xo, fi, yi, xi)
    block = _bind_blocks(s, out, [n, fo, s[out].fuse(yo, xo)], 1, 1)
    if plan.kz == 1:
        ty_ax, vi_ax = s[out].split(fi, factor=plan.vi)
        xt, vj_ax = s[out].split(xi, factor=plan.vj)
        s[out].reorder(ty_ax, yi, xt, vi_ax, vj_ax)
        tx_ax = s[out].fuse(yi, xt)
        s[out].bind(ty_ax, te.thread_axis("threadIdx.y"))
        s[out].bind(tx_ax, te.thread_axis("threadIdx.x"))
        s[out].unroll(vi_ax)
        s[out].unroll(vj_ax)
        s[conv].set_scope("local")
        s[conv].compute_at(s[out], tx_ax)
        _, cf, _, cx = s[conv].op.axis
        _conv_register_tile(s, conv, cf, cx, plan)
        return SOURCES["gemm"]
    rc = s[conv].op.reduce_axis[0]
    _, kz = s[conv].split(rc, factor=plan.kz)
    CF = s.rfactor(conv, kz, factor_axis=0)
    CL = s.cache_write(CF, "local")
    s[CF].set_scope("shared")
    s[CF].compute_at(s[out], block)
    z_ax, _, cf, cy, cx = s[CF].op.axis
    ty_ax, vi_ax = s[CF].split(cf, factor=plan.vi)
    xt, vj_ax = s[CF].split(cx, factor=plan.vj)
    s[CF].reorder(z_ax, ty_ax, cy, xt, vi_ax, vj_ax)
    tx_ax = s[CF].fuse(cy, xt)
    s[CF].bind(z_ax, te.thread_axis("threadIdx.z"))
    s[CF].bind(ty_ax, te.thread_axis("threadIdx.y"))
    s[CF].bind(tx_ax, te.thread_axis("threadIdx.x"))
    s[CF].unroll(vi_ax)
    s[CF].unroll(vj_ax)
    s[CL].compute_at(s[CF], tx_ax)
    _, _, lf, _, lx = s[CL].op.axis
    _conv_register_tile(s, CL, lf, lx, plan)
    tile = s[out].fuse(fi, yi, xi)
    t_x = _spread(s, out, tile, plan, plan.rows * y_tile * x_tile)
    s[conv].set_scope("local")
    s[conv].compute_at(s[out], t_x)
    return SOURCES["gemm_split"]


def _conv_register_tile(s, stage, f_ax, x_ax, plan) -> None:
    axes = s[stage].op.axis
    others = [ax for ax in axes if ax not in (f_ax, x_ax)]
    rc, *window = s[stage].op.reduce_axis
    s[stage].reorder(*others, rc, *window, f_ax, x_ax)
    s[stage].unroll(f_ax)
    s[stage].unroll(x_ax)
    if window:  # a window row unrolled: its loads issue together (kx, and ky for 3 x 3)
        s[stage].unroll(window[-1])
        if len(window) > 1 and numel([static_extent(w) or 99 for w in window]) <= 9:
            s[stage].unroll(window[0])
    else:
        _unroll_reduction(s, stage, rc)


def _unroll_reduction(s, stage, axis) -> None:
    """UNROLL_K steps of the reduction unrolled: their loads issue before the FMAs wait (a loop
    of one step at a time waits out a memory latency per step where operands come from DRAM)."""
    extent = static_extent(axis)
    if extent is not None and extent >= 2 * UNROLL_K and extent % UNROLL_K == 0:
        _, inner = s[stage].split(axis, factor=UNROLL_K)
        s[stage].unroll(inner)
