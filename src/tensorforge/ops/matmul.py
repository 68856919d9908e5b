"""Matrix multiply: the computation (declared once, `product`), a packed, cache-blocked,
register-tiled CPU schedule whose decisions are knobs, and its template "builtin/matmul".

The GPU schedule (ops/cuda.py) stages the same product through shared memory; the default
schedule for a target is `schedule_matmul(..., target=...)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tensorforge import te, tune
from tensorforge.ops.knobs import choose, current_target, is_gpu, target_scope, workload
from tensorforge.target import Target


def round_up(x: int, to: int) -> int:
    return (x + to - 1) // to * to


@dataclass(frozen=True)
class MatmulTiles:
    """Blocking of C = A @ B in the manner of GotoBLAS.

    The micro-kernel keeps an `mr` x `nr` tile of C in vector registers over `kc` steps of k,
    reading `mr` packed values of A (broadcast) and `nr` packed values of B per step. Around it,
    an `mb` x `nb` block of C accumulates in a local buffer (L2) over k blocks of `kc`, so the
    A block (mb x kc) stays in L2 and each B micro-panel (kc x nr) in L1 while it is reused.
    """

    mr: int
    nr: int
    k_unroll: int = 4
    mb: int = 48
    nb: int = 256
    kc: int = 256

    # None: decided by the heuristics below (needs_k_blocks, COLUMN_BLOCKS_TO_SHARE)
    pack_a: bool | None = None
    pack_b_per_block: bool | None = None
    a_prefetch_bytes: int = 1536
    l1_bytes: int = 32 * 1024  # the target's L1 data cache (for_target fills it in)

    COLUMN_BLOCKS_TO_SHARE = 8  # fewer column blocks than this: parallel over all blocks

    @staticmethod
    def for_target(target: Target, dtype: str = "float32") -> MatmulTiles:
        lanes = target.vector_lanes(dtype)
        if target.vector_bits >= 512:
            # 8 x 2 zmm accumulators (of 32 registers; 6, 12 and 14 rows, and 3 vectors a row,
            # measured within 2% on a 2 MB-L2 Xeon once A is fetched ahead). Narrower blocks,
            # longer k blocks than for AVX2: B micro-panels stream from L2 fast enough there
            # (2048³: 0.88x -> 1.05x OpenBLAS).
            # A double-pumped datapath (Zen 4) keeps AVX2's 6 rows: 1024³ at 1 thread,
            # interleaved, 8 x 2 86 GFLOP/s, 6 x 2 106 (AVX2 code 104, OpenBLAS 97).
            mr = 8 if target.vector_datapath_bits >= 512 else 6
            tiles = MatmulTiles(mr=mr, nr=2 * lanes, mb=48, nb=2 * 2 * lanes, kc=2048)
        else:
            tiles = MatmulTiles(mr=6, nr=2 * lanes)  # 16 ymm registers: 6 x 2
        return replace(tiles, l1_bytes=target.cache_bytes[0])

    def needs_k_blocks(self, k: int, itemsize: int) -> bool:
        """Does an `mr` x k sliver of A overflow L1 (with room left for the B stream)?

        Up to there the simpler schedule streams A straight from its rows and is as fast;
        beyond it, A is packed and k is blocked by `kc` (measured: 2048³ 0.88x -> 0.99x numpy).
        """
        return self.mr * k * itemsize > self.l1_bytes * 3 // 4

    def fitted(self, n: int, m: int, k: int, itemsize: int = 4) -> MatmulTiles:
        """The same tiles with blocks no larger than the (padded) problem, and the packing
        decisions left to the heuristics made."""
        fitted = replace(
            self,
            mb=min(self.mb, round_up(n, self.mr)),
            nb=min(self.nb, round_up(m, self.nr)),
            kc=min(self.kc, k),
        )
        pack_a = self.needs_k_blocks(k, itemsize) if self.pack_a is None else self.pack_a
        per_block = self.pack_b_per_block
        if per_block is None:
            per_block = -(-m // fitted.nb) >= self.COLUMN_BLOCKS_TO_SHARE
        return replace(fitted, pack_a=pack_a, pack_b_per_block=pack_a and per_block)

    @staticmethod
    def define(cfg, target: Target, n: int, m: int, k: int, dtype: str) -> MatmulTiles:
        """The tiles as knobs of `cfg`, each defaulting to what `for_target` and the packing
        heuristics pick for this problem on `target` (so the default config is the default
        schedule). Space: ~10^5 configs."""
        base = MatmulTiles.for_target(target, dtype)
        lanes = target.vector_lanes(dtype)
        mr = choose(cfg, "mr", base.mr, (4, 6, 8, 12))
        nr = lanes * choose(cfg, "nr_vectors", base.nr // lanes, (1, 2, 3))
        k_unroll = choose(cfg, "k_unroll", base.k_unroll, (1, 2, 4, 8))
        mb = mr * choose(cfg, "mb_tiles", base.mb // base.mr, (2, 4, 8, 16))
        nb = nr * choose(cfg, "nb_panels", base.nb // base.nr, (1, 2, 4, 8, 16))
        kc = choose(cfg, "kc", base.kc, (128, 256, 512, 1024, 2048))
        heuristic = base.fitted(n, m, k, _itemsize(dtype))
        pack_a = choose(cfg, "pack_a", heuristic.pack_a, (False, True))
        per_block = choose(cfg, "pack_b_per_block", heuristic.pack_b_per_block, (False, True))
        ahead = choose(cfg, "a_prefetch_bytes", base.a_prefetch_bytes, (0, 768, 1536, 3072))
        return MatmulTiles(mr, nr, k_unroll, mb, nb, kc, pack_a, per_block, ahead, base.l1_bytes)


def product(
    n: int,
    m: int,
    k: int,
    a_at: Callable,
    b_at: Callable,
    name: str = "C",
    batch: tuple[int, ...] = (),
) -> te.Tensor:
    """The one declaration of the matrix product: `name`[i, j] = sum_k a_at(i, k) * b_at(k, j).

    `a_at` / `b_at` read A and B wherever a schedule keeps them (the user's arrays, packed
    panels, a transposed shared-memory copy). With `batch` extents, the output is
    (*batch, n, m) and both readers get the batch indices first: a_at(*b, i, k)."""
    r = te.reduce_axis((0, k), name="k")
    if not batch:  # the lambdas' parameter names name the loops: i, j (b, i, j with a batch)
        return te.compute((n, m), lambda i, j: te.sum(a_at(i, r) * b_at(r, j), axis=r), name=name)
    if len(batch) == 1:
        return te.compute(
            (*batch, n, m),
            lambda b, i, j: te.sum(a_at(b, i, r) * b_at(b, r, j), axis=r),
            name=name,
        )
    return te.compute(
        (*batch, n, m),
        lambda *idx: te.sum(a_at(*idx[:-1], r) * b_at(*idx[:-2], r, idx[-1]), axis=r),
        name=name,
    )


def matmul(
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    tiles: MatmulTiles | None = None,
    pack_a: bool = False,
    transpose_b: bool = False,
):
    """C = A @ B, or with `transpose_b` C = A @ B.T for B of shape (m, k) (a dense / linear
    layer's weight). With `tiles`, B is first re-laid out into zero-padded column panels
    `packedB[panel][k][nr]` (and with `pack_a`, A into row panels `packedA[panel][k][mr]`),
    padded to whole blocks.

    Returns (A, B, packedA, packedB, C); the packed stages not made are None.
    """
    A = te.placeholder((n, k), dtype=dtype, name="A")
    B = te.placeholder((m, k) if transpose_b else (k, m), dtype=dtype, name="B")
    b_of = (lambda kk, j: B[j, kk]) if transpose_b else (lambda kk, j: B[kk, j])
    if tiles is None:
        return A, B, None, None, product(n, m, k, lambda i, r: A[i, r], b_of)
    mr, nr, zero = tiles.mr, tiles.nr, te.const(0, dtype)
    packedB = te.compute(
        (round_up(m, tiles.nb) // nr, k, nr),  # whole blocks: the block loops need no guards
        lambda p, kk, x: te.if_then_else(p * nr + x < m, b_of(kk, te.min(p * nr + x, m - 1)), zero),
        name="packedB",
    )
    b_at = lambda kk, j: packedB[j // nr, kk, j % nr]  # noqa: E731
    if not pack_a:
        return A, B, None, packedB, product(n, m, k, lambda i, r: A[i, r], b_at)
    packedA = te.compute(
        (round_up(n, tiles.mb) // mr, k, mr),
        lambda p, kk, x: te.if_then_else(p * mr + x < n, A[te.min(p * mr + x, n - 1), kk], zero),
        name="packedA",
    )
    C = product(n, m, k, lambda i, r: packedA[i // mr, r, i % mr], b_at)
    return A, B, packedA, packedB, C


@tune.template("builtin/matmul")
def matmul_template(
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    parallel: bool = True,
    transpose_b: bool = False,
):
    """C[n, m] = A[n, k] @ B[k, m] (B[m, k].T with `transpose_b`) on the current target; every
    blocking decision a knob.

    The default config is `schedule_matmul`'s schedule (see MatmulTiles.define)."""
    target = current_target()
    if is_gpu(target):
        from tensorforge.ops.cuda import matmul_cuda_template

        return matmul_cuda_template.func(n, m, k, dtype, transpose_b)  # counts its flop
    cfg = tune.get_config()
    cfg.add_flop(2.0 * n * m * k)  # the product's, not the packing's index arithmetic
    tiles = MatmulTiles.define(cfg, target, n, m, k, dtype)
    return _schedule_cpu(n, m, k, dtype, parallel, tiles, transpose_b)


def schedule_matmul(
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    target: Target | None = None,
    parallel: bool = True,
    tiles: MatmulTiles | None = None,
    transpose_b: bool = False,
):
    """The project's best GEMM schedule for `target` (default: the current one, else this CPU).

    It is template "builtin/matmul" called plainly: its default config, or the best logged
    config inside `tune.apply_history_best`. Given `tiles`, those tiles on the CPU instead.
    With `transpose_b`, B is (m, k) and C = A @ B.T. Returns (schedule, [A, B, C])."""
    if tiles is not None:
        return _schedule_cpu(n, m, k, dtype, parallel, tiles, transpose_b)
    args = workload((n, m, k, dtype), parallel)
    if transpose_b:
        args = (n, m, k, dtype, parallel, True)
    with target_scope(target):
        return matmul_template(*args)


def _schedule_cpu(
    n: int, m: int, k: int, dtype: str, parallel: bool, tiles: MatmulTiles, transpose_b: bool
):
    tiles = tiles.fitted(n, m, k, _itemsize(dtype))
    blocked = tiles.pack_a
    A, B, packedA, packedB, C = matmul(n, m, k, dtype, tiles, blocked, transpose_b)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    # with enough column blocks to share out, each thread packs the B panel of its column block
    # into its own L2 right before using it, rather than all of B in a pass of its own first
    # (2048³: 1 thread 0.95x -> 0.99x OpenBLAS, 2 threads 0.86x -> 0.93x)
    pack_b_per_block = tiles.pack_b_per_block
    for packed in (packedA, packedB):  # panel by panel, the panel width innermost
        if packed is None:
            continue
        p, _, x = s[packed].op.axis
        s[packed].vectorize(x)
        if parallel and not (packed is packedB and pack_b_per_block):
            s[packed].parallel(p)
    if blocked:
        _schedule_blocks(s, C, CC, packedA, packedB if pack_b_per_block else None, tiles, parallel)
    else:
        _schedule_panels(s, C, CC, tiles, parallel)
    return s, [A, B, C]


def _schedule_panels(s, C, CC, tiles: MatmulTiles, parallel: bool) -> None:
    """Panels of nr columns, mr-row tiles inside, each accumulated in registers over all of k."""
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=tiles.nr)
    io, ii = s[C].split(i, factor=tiles.mr)
    s[C].reorder(jo, io, ii, ji)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(jo)
    s[CC].compute_at(s[C], io)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=tiles.k_unroll)
    s[CC].reorder(ko, ki, ci, cj)
    micro_kernel(s, CC, ki, ci, cj)


def _schedule_blocks(s, C, CC, packedA, packedB, tiles: MatmulTiles, parallel: bool) -> None:
    """mb x nb blocks of C, each accumulated in a local buffer over k blocks of kc, then copied
    out (guarded); inside a k block, B micro-panels, then A micro-tiles: the micro-kernel.

    With `packedB`, column blocks run in parallel and pack their B panel first; without, all
    blocks share out (B packed before)."""
    i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=tiles.nb, tail="guard")
    io, ii = s[C].split(i, factor=tiles.mb, tail="guard")
    s[C].reorder(jo, io, ii, ji)
    _, jv = s[C].split(ji, factor=tiles.nr)
    s[C].vectorize(jv)
    block = io if packedB is not None else s[C].fuse(jo, io)
    if parallel:
        s[C].parallel(jo if packedB is not None else block)
    s[CC].compute_at(s[C], block)
    if packedB is not None:
        s[packedB].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    cio, cii = s[CC].split(ci, factor=tiles.mr)
    cjo, cji = s[CC].split(cj, factor=tiles.nr)
    ko, ki = s[CC].split(ck, factor=tiles.kc)
    kio, kii = s[CC].split(ki, factor=tiles.k_unroll)
    s[CC].reorder(ko, cjo, cio, kio, kii, cii, cji)
    micro_kernel(s, CC, kii, cii, cji)
    # the packed A sliver streams from L3: fetch it ~1.5 KiB ahead (2048³, 2 threads:
    # 0.92-0.95x -> 0.99x OpenBLAS; with A read from its rows (no k blocks) it only cost)
    if tiles.a_prefetch_bytes:
        sliver_step = tiles.k_unroll * tiles.mr * _itemsize(C.dtype)
        s[CC].prefetch(packedA, kio, -(-tiles.a_prefetch_bytes // sliver_step))


def micro_kernel(s, CC, k_step, rows, cols) -> None:
    """k unrolled by k_unroll, mr rows unrolled, nr columns as vectors: an FMA chain."""
    s[CC].unroll(k_step)
    s[CC].unroll(rows)
    s[CC].vectorize(cols)


def _itemsize(dtype: str) -> int:
    from tensorforge.te.dtype import bits_of

    return bits_of(dtype) // 8
