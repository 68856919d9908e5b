"""bfloat16 products on the CPU's dot-product instructions (AVX512-BF16 `vdpbf16ps`, AMX
`tdpbf16ps`): mm, addmm and linear layers whose right matrix is a constant (the weights), and
bmm / matmul of two computed matrices (attention's Q K^T and P V).

The product is declared the way ops/cpu_dot's micro-kernel intrinsic matches it:

    At[i, k]  = A[min(i, n - 1), k] if k < K else 0       (rows to whole tiles, k to whole blocks)
    P[p, q, x, t] = B[2q + t, p nr + x]                    (VNNI panels, packed at compile time)
    C[i, j]   = sum_k float32(At[i, k]) * float32(P[j / nr, k / 2, j % nr, k % 2])

and the kernel's epilogue (bias, GELU, residual adds, the cast to bfloat16: any element-wise
chain) reads C tile by tile (graph/schedules_cpu_dot.py). Rows past n read row n - 1 (in
bounds, never stored); k past K reads zeros, as the panels' padding holds zeros, so no NaN of
a neighbouring value reaches a sum.

Rows known only at run time (dynamic=True) are not padded: C's rows are rounded up to whole
tiles, and each call of the micro-kernel is given the rows its tile has (dot_intrin's `rows`),
so A's rows past n are never read and C's never written (nor read: the epilogue's rows are
guarded). bmm packs each batch entry's right matrix into the panels at run time, a stage of the
product's kernel (P[e, p, q, x, t] = B[e, 2q + t, p nr + x], zero past K and m): attention's
K^T is read there as it lies, with no transpose kernel before it; its columns and k, where
known only at run time (a sequence), are rounded up to whole tiles and blocks, the copies
zero-padded. Targets without the instruction keep lower_linalg's float32 register tiles.
"""

from __future__ import annotations

import torch

from tensorforge import te
from tensorforge.graph.values import Anchor, Lazy
from tensorforge.ir.arith import simplify_expr
from tensorforge.ops import cpu_dot
from tensorforge.te.expr import TensorRead
from tensorforge.te.visit import walk

KIND = "bfloat16"
MOST_ROWS = 64  # rows of C per micro-kernel call: A's 64 x kc block stays in L1 beside the panel
RUN_TIME_KC = 64  # k per call where k is known at run time only (zero-padded to whole blocks)


def wants_cpu_dot(target, dtype: str, shape, k, constant: torch.Tensor | None) -> bool:
    """A bfloat16 product with constant weights (rows static or known only at run time), for a
    CPU target that has the dot instruction (the target's features, not this host's)."""
    if target.kind != "llvm" or dtype != "bfloat16" or constant is None:
        return False
    if len(shape) != 2 or not all(isinstance(e, int) for e in (shape[1], k)):
        return False
    return cpu_dot.has_feature(KIND, target)


def choose_tiles(target, n: int, m: int, k: int) -> cpu_dot.DotTiles:
    """The target's tiles (cpu_dot.DotTiles) fitted to the product, with the rows cut into
    equal tiles of at most MOST_ROWS, so fewer rows are padded than tiles (128 tokens: 2 x 64;
    130 rows: 3 x 44, two padded, where the target's 48-row tiles would pad 14). AMX tiles
    take rows in 16s."""
    tiles = cpu_dot.DotTiles.for_target(KIND, target).fitted(n, m, k, KIND)
    if tiles.amx:
        return tiles
    rows = -(-n // -(-n // MOST_ROWS))
    return cpu_dot.DotTiles(rows, tiles.nr, tiles.kc, tiles.amx, tiles.order)


def cpu_dot_product(ctx, node, a: Lazy, constant: torch.Tensor, shape, dtype: str) -> Lazy:
    """The anchor of a product on the dot micro-kernel (see the module doc), as a Lazy of the
    product's shape."""
    n, m = shape
    k = int(a.shape[-1])
    static = isinstance(n, int)
    tiles = choose_tiles(ctx.target, n if static else MOST_ROWS, m, k)
    cpu_dot.load_microkernels(ctx.target)  # their symbols, for the kernel built (or loaded) next
    # rows known at run time: no padding, the last tile's calls take the rows left (dot_intrin)
    rows = cpu_dot.round_up(n, tiles.mr) if static else n
    cols = cpu_dot.round_up(m, tiles.nr)
    depth = cpu_dot.round_up(k, tiles.kc)
    step = cpu_dot.KINDS[KIND].step
    padded = torch.zeros(depth, cols, dtype=torch.bfloat16)
    padded[:k, :m] = constant
    panels = padded.reshape(depth // step, step, cols // tiles.nr, tiles.nr)
    weights = ctx.add_constant(panels.permute(2, 0, 3, 1), f"{node.name}_panels")
    a_at, a_tile = _a_tile(ctx, node, a, n, k, rows, depth)
    if not static:  # C's tiles whole (the last one's rows past n never written nor read)
        rows = (n + tiles.mr - 1) // tiles.mr * tiles.mr
    r = te.reduce_axis((0, depth), name="k")
    packed, nr = weights.source.placeholder, tiles.nr

    def product(i, j):
        b_at = packed[j // nr, r.var // step, j % nr, r.var % step]
        return te.sum(a_at((i, r.var)).astype("float32") * b_at.astype("float32"), axis=r)

    C = te.compute((rows, cols), product, name=ctx.unique(f"mm_{node.name}"))
    stages = [C] + ([a_tile] if a_tile is not None else [])
    info = {"shape": tuple(shape), "stages": stages, "k": depth, "cpu_dot": tiles}
    if not static:
        info["run_time_rows"] = n
    anchor = Anchor("matmul", C, frozenset(a.reads | weights.reads), (node.name,), info)
    return ctx.anchored(anchor, lambda ia: C[tuple(ia)], dtype)


def _a_tile(ctx, node, a: Lazy, n: int, k: int, rows: int, depth: int):
    """The left matrix as the micro-kernel reads it: (read, None) where `a` is already such
    rows in memory (row-major rows of whole tiles of a bfloat16 buffer: its own, the qkv
    projection's columns that are attention's Q), else (read, stage) of a stage that lays it
    out so (padded, or of a view that is no such rows). read(index) -> the value."""
    padded = rows is not n and rows != n  # (rows known at run time are never padded)
    whole_k = depth is k or (isinstance(k, int) and depth == k)
    if not padded and whole_k and _rows_in_memory(a):
        return a.at, None
    zero = te.const(0, "bfloat16")

    def at(*idx):
        *bi, i, kk = idx
        value = a.at((*bi, te.min(i, n - 1) if padded else i, kk)).astype("bfloat16")
        return value if whole_k else te.if_then_else(kk < k, value, zero)

    stage = te.compute((*a.shape[:-2], rows, depth), at, name=ctx.unique(f"{node.name}_a_tile"))
    return (lambda idx: stage[tuple(idx)]), stage


def _rows_in_memory(a: Lazy) -> bool:
    """Does `a` read one bfloat16 buffer at [..., base + i, base + k] (bases free of i and k):
    rows the micro-kernel can read where they lie, one row stride apart?"""
    if a.dtype != "bfloat16" or len(a.reads) != 1 or a.ndim < 2:
        return False
    (buf,) = a.reads
    idx = tuple(te.var(f"a_index{d}") for d in range(a.ndim))
    read = a.at(idx)
    if not isinstance(read, TensorRead) or read.tensor is not buf.placeholder:
        return False
    if len(read.indices) < 2:  # a vector viewed as one row (F.linear of a 1-d input)
        return False
    *outer, row, col = read.indices
    i, kk = idx[-2:]

    def free(e) -> bool:
        return not any(v is i or v is kk for v in walk(simplify_expr(e)))

    return all(map(free, outer)) and free(row - i) and free(col - kk)


def wants_cpu_dot_bmm(target, dtype: str, shape, k) -> bool:
    """A batched bfloat16 product (attention's Q K^T and P V: both operands computed; any of
    its sizes may be known only at run time: a batch or sequence under dynamic=True), for a
    CPU target that has the dot instruction."""
    if target.kind != "llvm" or dtype != "bfloat16" or len(shape) != 3:
        return False
    return cpu_dot.has_feature(KIND, target)


def _whole(size, tile: int):
    """`size` rounded up to whole tiles (an expression where `size` is one)."""
    return (
        cpu_dot.round_up(size, tile) if isinstance(size, int) else (size + tile - 1) // tile * tile
    )


def cpu_dot_bmm(
    ctx, node, a: Lazy, b: Lazy, shape, dtype: str, logical_shape=None, to_logical=None
) -> Lazy:
    """The anchor of a batched product on the dot micro-kernel: the right matrices packed into
    the VNNI panels at run time, in the kernel, before the products (a stage:
    P[e, p, q, x, t] = B[e, 2q + t, p nr + x], zero past k and m), then each batch entry's
    product as mm's (the module doc). Sizes known at run time are rounded up to whole tiles
    (rows: the calls take the rows left; k and columns: zeros in the copies). The value is of
    `logical_shape` (the product's by default), onto which `to_logical` maps a product index
    (a 1x1 convolution's (n, f, p) -> (n, f, y, x))."""
    batch, n, m = shape
    k = a.shape[-1]
    # run-time sizes tile as their largest tiles would: 64 rows, 64 columns, k blocks of 64
    most = (MOST_ROWS, 64, RUN_TIME_KC)
    known = [v if isinstance(v, int) else t for v, t in zip((n, m, k), most, strict=True)]
    tiles = choose_tiles(ctx.target, *known)
    cpu_dot.load_microkernels(ctx.target)
    rows = cpu_dot.round_up(n, tiles.mr) if isinstance(n, int) else n  # run time: not padded
    depth = _whole(k, tiles.kc)
    step, nr = cpu_dot.KINDS[KIND].step, tiles.nr
    a_at, a_tile = _a_tile(ctx, node, a, n, k, rows, depth)
    zero = te.const(0, "bfloat16")

    def pack(e, p, q, x, t):
        # the tests and clamps are written over lane = (p nr + x) step + t (and q, p), a ramp
        # of the vector along (x, t): ir/passes/peel_vector_bounds then peels the last panel,
        # the only one past m, and the others read with no clamp (a 1x1 convolution's 784
        # positions in panels of 64: the packing 0.29 -> ~0.05 ms for 512 channels)
        lane = (p * nr + x) * step + t
        kk = q * step + t
        j = te.min(lane, m * step - 1) // step
        value = b.at((e, te.min(kk, k - 1), j)).astype("bfloat16")
        return te.if_then_else(te.all(kk < k, lane < m * step), value, zero)

    panel_shape = (batch, _whole(m, nr) // nr, _whole(k, tiles.kc) // step, nr, step)
    panels = te.compute(panel_shape, pack, name=ctx.unique(f"{node.name}_panels"))
    r = te.reduce_axis((0, depth), name="k")

    def product(e, i, j):
        b_at = panels[e, j // nr, r.var // step, j % nr, r.var % step]
        return te.sum(a_at((e, i, r.var)).astype("float32") * b_at.astype("float32"), axis=r)

    whole = (batch, _whole(n, tiles.mr), _whole(m, nr))
    C = te.compute(whole, product, name=ctx.unique(f"mm_{node.name}"))
    stages = [C] + ([a_tile] if a_tile is not None else [])
    info = {"shape": tuple(shape), "stages": stages, "k": depth, "cpu_dot": tiles}
    info["pack"] = panels
    if not isinstance(n, int):
        info["run_time_rows"] = n
    anchor = Anchor("matmul", C, frozenset(a.reads | b.reads), (node.name,), info)
    at = lambda ia: C[tuple(ia)]  # noqa: E731
    return ctx.anchored(anchor, at, dtype, shape=logical_shape, to_logical=to_logical)
