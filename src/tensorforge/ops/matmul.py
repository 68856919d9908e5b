"""Matrix multiply: the computation and a register-tiled, B-packed CPU schedule."""

from __future__ import annotations

from dataclasses import dataclass

from tensorforge import te
from tensorforge.target import Target


@dataclass(frozen=True)
class MatmulTiles:
    """A micro-kernel of `mr` x `nr` accumulators kept in vector registers."""

    mr: int
    nr: int
    k_unroll: int = 4

    @staticmethod
    def for_target(target: Target, dtype: str = "float32") -> "MatmulTiles":
        lanes = target.vector_lanes(dtype)
        if target.vector_bits >= 512:  # 32 zmm registers: 6 rows x 3 vectors of accumulators
            return MatmulTiles(mr=6, nr=3 * lanes)
        return MatmulTiles(mr=6, nr=2 * lanes)  # 16 ymm registers: 6 x 2 accumulators


def matmul(n: int, m: int, k: int, dtype: str = "float32", nr: int | None = None):
    """C = A @ B with B re-laid out into zero-padded `[ceil(m/nr), k, nr]` panels.

    Returns (A, B, packedB, C); without `nr` there is no packing stage (packedB is None).
    """
    A = te.placeholder((n, k), dtype=dtype, name="A")
    B = te.placeholder((k, m), dtype=dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    if nr is None:
        C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
        return A, B, None, C
    panels = (m + nr - 1) // nr
    packedB = te.compute(
        (panels, k, nr),
        lambda p, kk, x: te.if_then_else(p * nr + x < m, B[kk, te.min(p * nr + x, m - 1)], te.const(0, dtype)),
        name="packedB",
    )
    C = te.compute(
        (n, m), lambda i, j: te.sum(A[i, r] * packedB[j // nr, r, j % nr], axis=r), name="C"
    )
    return A, B, packedB, C


def schedule_matmul(n: int, m: int, k: int, dtype: str = "float32", target: Target | None = None,
                    parallel: bool = True, tiles: MatmulTiles | None = None):
    """The project's best CPU GEMM schedule. Returns (schedule, [A, B, C])."""
    target = target or Target("llvm")
    tiles = tiles or MatmulTiles.for_target(target, dtype)
    A, B, packedB, C = matmul(n, m, k, dtype, nr=tiles.nr)
    s = te.create_schedule(C.op)
    # pack B panel by panel, vectorized along the panel width
    p, kk, x = s[packedB].op.axis
    s[packedB].vectorize(x)
    if parallel:
        s[packedB].parallel(p)
    # the output: panels of nr columns, mr-row tiles inside, accumulated in registers
    CC = s.cache_write(C, "local")
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
    s[CC].unroll(ki)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    return s, [A, B, C]
