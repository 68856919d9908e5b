"""Batched matrix multiply C[b] = A[b] @ B[b] (or A[b] @ B[b].T): ops.matmul's product with a
batch axis, a packed, register-tiled CPU schedule whose decisions are knobs, and the template
"builtin/batch_matmul"."""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.ops.knobs import choose, current_target, is_gpu, target_scope, workload
from tensorforge.ops.matmul import MatmulTiles, micro_kernel, product, round_up
from tensorforge.target import Target


def batch_matmul(
    batch: int,
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    nr: int | None = None,
    transpose_b: bool = False,
):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] (B[b, j, k] with `transpose_b`). With `nr`,
    each B is first re-laid out into zero-padded column panels `packedB[b][panel][k][nr]`.

    Returns (A, B, packedB, C); packedB is None without `nr`."""
    A = te.placeholder((batch, n, k), dtype=dtype, name="A")
    B = te.placeholder((batch, m, k) if transpose_b else (batch, k, m), dtype=dtype, name="B")

    def b_of(b, kk, j):
        return B[b, j, kk] if transpose_b else B[b, kk, j]

    a_at = lambda b, i, r: A[b, i, r]  # noqa: E731
    if nr is None:
        return A, B, None, product(n, m, k, a_at, b_of, batch=(batch,))
    zero = te.const(0, dtype)
    packedB = te.compute(
        (batch, round_up(m, nr) // nr, k, nr),
        lambda b, p, kk, x: te.if_then_else(
            p * nr + x < m, b_of(b, kk, te.min(p * nr + x, m - 1)), zero
        ),
        name="packedB",
    )
    b_at = lambda b, kk, j: packedB[b, j // nr, kk, j % nr]  # noqa: E731
    return A, B, packedB, product(n, m, k, a_at, b_at, batch=(batch,))


@tune.template("builtin/batch_matmul")
def batch_matmul_template(
    batch: int,
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    parallel: bool = True,
    transpose_b: bool = False,
):
    """Batched GEMM on the current target; the default config is `schedule_batch_matmul`'s."""
    target = current_target()
    cfg = tune.get_config()
    cfg.add_flop(2.0 * batch * n * m * k)
    if is_gpu(target):
        return _schedule_gpu(batch, n, m, k, dtype, transpose_b, cfg)
    base = MatmulTiles.for_target(target, dtype)
    lanes = target.vector_lanes(dtype)
    mr = choose(cfg, "mr", base.mr, (4, 6, 8, 12))
    nr = lanes * choose(cfg, "nr_vectors", base.nr // lanes, (1, 2, 3))
    k_unroll = choose(cfg, "k_unroll", base.k_unroll, (1, 2, 4, 8))
    return _schedule_cpu(batch, n, m, k, dtype, parallel, transpose_b, mr, nr, k_unroll)


def schedule_batch_matmul(
    batch: int,
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    target: Target | None = None,
    parallel: bool = True,
    transpose_b: bool = False,
):
    """The default batched-GEMM schedule for `target`: template "builtin/batch_matmul" called
    plainly. Returns (schedule, [A, B, C])."""
    args = workload((batch, n, m, k, dtype), parallel)
    if transpose_b:
        args = (batch, n, m, k, dtype, parallel, True)
    with target_scope(target):
        return batch_matmul_template(*args)


def _schedule_cpu(batch, n, m, k, dtype, parallel, transpose_b, mr, nr, k_unroll):
    """Per batch, ops.matmul's panel schedule: B packed into nr-wide panels; mr x nr tiles of
    C accumulate in registers over all of k; (batch, panel) pairs run in parallel."""
    A, B, packedB, C = batch_matmul(batch, n, m, k, dtype, nr, transpose_b)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    pb, p, _, x = s[packedB].op.axis
    s[packedB].vectorize(x)
    if parallel:
        s[packedB].parallel(s[packedB].fuse(pb, p))
    b, i, j = s[C].op.axis
    jo, ji = s[C].split(j, factor=nr)
    io, ii = s[C].split(i, factor=mr)
    s[C].reorder(b, jo, io, ii, ji)
    s[C].vectorize(ji)
    if parallel:
        s[C].parallel(s[C].fuse(b, jo))
    s[CC].compute_at(s[C], io)
    _, ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=k_unroll)
    s[CC].reorder(ko, ki, ci, cj)
    micro_kernel(s, CC, ki, ci, cj)
    return s, [A, B, C]


def _schedule_gpu(batch, n, m, k, dtype, transpose_b, cfg):
    """A plain GPU schedule: a `tile` x `tile` block of C per thread block, one output per
    thread, k accumulated in a register. (The shared-memory GEMM of ops/cuda.py is not yet
    batched.)"""
    tile = choose(cfg, "tile", 16, (8, 32))
    A, B, _, C = batch_matmul(batch, n, m, k, dtype, None, transpose_b)
    s = te.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    b, i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, tile, tile)
    s[C].bind(b, te.thread_axis("blockIdx.z"))
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(ii, te.thread_axis("threadIdx.y"))
    s[C].bind(ji, te.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], ji)
    return s, [A, B, C]
