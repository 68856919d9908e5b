"""The CPU schedule of a product on the dot micro-kernel (graph/lower_cpu_dot.py) and its
epilogue.

The output is cut into mr x nr tiles, row tiles outside and column panels inside (A's mr x k
rows stay in L2 while the panels stream past them once), each batch entry's (bmm) one after
another. At each tile the product is computed into an mr x nr float32 buffer by ops/cpu_dot's
micro-kernel (`tensorize`), one call per kc block of k (the first initializes the tile, or a
reset does where there are several), and the epilogue then reads that buffer while it is in
L1, in vectors along the row. Sizes known only at run time put the batch entries, or else the
column panels, outside (in parallel) and the row tiles inside, the last one's calls given the
rows left. The left matrix's copy (where it is padded or laid out) and bmm's panels are made
before the products.
"""

from __future__ import annotations

from tensorforge import te
from tensorforge.graph.schedules_cpu_products import PARALLEL_MIN_ELEMENTS
from tensorforge.graph.values import is_static, numel
from tensorforge.ops import cpu_dot
from tensorforge.ops.cpu_dot_kernels import vector_path

COPY_VECTOR = 64  # bfloat16 lanes of the left matrix's copy: one zmm


def source(anchor, target) -> str:
    """The schedule's name in the report: the micro-kernel's instructions and tiles."""
    tiles = anchor.info["cpu_dot"]
    path = ("amx-bf16 / " if tiles.amx else "") + vector_path("bfloat16", target)
    return (
        f"matmul: bfloat16 dot micro-kernel ({path}, ops/cpu_dot), {tiles.mr} x {tiles.nr} "
        f"tiles, kc {tiles.kc}"
    )


def schedule_cpu_dot(s, out, anchor, target) -> str:
    """Schedule the product `anchor` (info["cpu_dot"]: its DotTiles) under output stage `out`:
    one task per tile of each batch entry; the left matrix's copy and (bmm) the right ones'
    panels, where the kernel makes them, before the products."""
    tiles = anchor.info["cpu_dot"]
    C, *a_tile = anchor.info["stages"]
    *batch, i, j = s[out].op.axis
    io, jo, ii, ji = s[out].tile(i, j, tiles.mr, tiles.nr)
    s[out].vectorize(ji)
    rows = anchor.info.get("run_time_rows")  # None: static rows, padded to whole tiles
    static = is_static(anchor.info["shape"]) and isinstance(anchor.info["k"], int)
    if static:
        tile = s[out].fuse(*batch, io, jo)  # one task per tile: as many as there are
        outer = tile
    else:
        # sizes known at run time: the batch entries or else the column panels in parallel,
        # each tile's loops their own: a tile loop of its own proves its C tile inside C
        # (rounded up to whole tiles), which a fused index (io = fused // panels) did not, so
        # its calls were taken for a partial tile's
        s[out].reorder(*batch, jo, io)
        tile, outer = io, (batch[0] if batch else jo)
    threads = not static or numel(anchor.info["shape"]) >= PARALLEL_MIN_ELEMENTS
    if threads:
        s[out].parallel(outer)

    s[C].compute_at(s[out], tile)
    *cb, ci, cj = s[C].op.axis
    (ck,) = s[C].op.reduce_axis
    depth = anchor.info["k"]
    if not isinstance(depth, int) or depth > tiles.kc:  # k blocks outside: the tile reset,
        ko, ki = s[C].split(ck, factor=tiles.kc)  # then accumulated block by block
        s[C].reorder(*cb, ko, ci, cj, ki)
    # rows known at run time: each call computes the rows its tile has (none padded)
    count = None if rows is None else te.min(tiles.mr, rows - io.var * tiles.mr)
    intrin = cpu_dot.dot_intrin("bfloat16", tiles.mr, tiles.kc, tiles.nr, target, tiles.amx, count)
    s[C].tensorize(ci, intrin)

    for stage in a_tile:  # the left matrix laid out (padded) before the products, in vectors
        *lead, rows, cols = s[stage].op.axis
        _, lanes = s[stage].split(cols, factor=COPY_VECTOR)
        s[stage].vectorize(lanes)
        if threads:
            s[stage].parallel(s[stage].fuse(*lead, rows))
    pack = anchor.info.get("pack")
    if pack is not None:  # bmm: the right matrices' panels, a panel row (nr x 2) a vector
        e, p, q, x, t = s[pack].op.axis
        s[pack].vectorize(s[pack].fuse(x, t))
        if threads:
            s[pack].parallel(s[pack].fuse(e, p))
    return source(anchor, target)
