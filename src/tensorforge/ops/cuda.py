"""GPU schedules: element-wise, tiled matmul with shared and register caches, row softmax.

The computations are the operators' own (ops/matmul.py's `product`, ops/softmax.py's
`softmax`); the matmul's decisions are knobs of template "builtin/matmul" on a CUDA target
(also registered as "builtin/matmul_cuda"), defaulting to what `schedule_matmul_cuda` picks.
"""

from __future__ import annotations

from tensorforge import te, tune
from tensorforge.ops.knobs import choose
from tensorforge.ops.matmul import matmul, product
from tensorforge.ops.softmax import softmax
from tensorforge.schedule import auto_inline


def schedule_elementwise_cuda(out, threads: int = 256, vector: int = 4):
    """Fuse the injective chain into `out`; each thread handles `vector` contiguous elements (float4)."""
    s = te.create_schedule(out.op)
    auto_inline(s)
    bind_elementwise_cuda(s, out, threads, vector)
    return s


def bind_elementwise_cuda(s, out, threads: int = 256, vector: int = 4) -> None:
    """`out`'s stage flattened, a thread per `vector` contiguous outputs (one vector store),
    `threads` threads a block."""
    axes = s[out].op.axis
    fused = s[out].fuse(*axes) if len(axes) > 1 else axes[0]
    rest, vec = s[out].split(fused, factor=vector)
    block, thread = s[out].split(rest, factor=threads)
    s[out].bind(block, te.thread_axis("blockIdx.x"))
    s[out].bind(thread, te.thread_axis("threadIdx.x"))
    s[out].vectorize(vec)


def matmul_cuda(n: int, m: int, k: int, dtype: str = "float32"):
    """(A, B, C) of the plain product (ops.matmul's declaration)."""
    A, B, _, _, C = matmul(n, m, k, dtype)
    return A, B, C


def default_block(n: int, m: int) -> int:
    """128-wide tiles only where there are enough of them to fill an H100's 132 SMs."""
    return 128 if (n // 128) * (m // 128) >= 132 else 64


@tune.template("builtin/matmul_cuda")
def matmul_cuda_template(n: int, m: int, k: int, dtype: str = "float32", transpose_b: bool = False):
    """`schedule_matmul_cuda`'s decisions as knobs, each defaulting to its default argument.

    Configs whose blocks need more threads or shared memory than the GPU has fail to build or
    run, and are recorded as such."""
    cfg = tune.get_config()
    cfg.add_flop(2.0 * n * m * k)
    return _schedule_matmul_cuda(
        n,
        m,
        k,
        dtype,
        block=choose(cfg, "block", default_block(n, m), (32, 64, 128)),
        thread_tile=choose(cfg, "thread_tile", 8, (4, 8)),
        k_tile=choose(cfg, "k_tile", 16, (8, 16, 32)),
        vector=choose(cfg, "vector", 4, (2, 4)),
        unroll=choose(cfg, "unroll", True, (False,)),
        double_buffer=choose(cfg, "double_buffer", False, (True,)),
        transpose_b=transpose_b,
    )


def schedule_matmul_cuda(
    n: int,
    m: int,
    k: int,
    dtype: str = "float32",
    block: int | None = None,
    thread_tile: int | None = None,
    k_tile: int | None = None,
    vector: int | None = None,
    unroll: bool | None = None,
    double_buffer: bool | None = None,
    transpose_b: bool = False,
):
    """The default CUDA GEMM schedule (template "builtin/matmul_cuda" called plainly: its
    default config, or the best logged one under `tune.apply_history_best`); any argument
    given replaces that knob's choice. Returns (schedule, [A, B, C])."""
    given = (block, thread_tile, k_tile, vector, unroll, double_buffer)
    if all(v is None for v in given):
        return matmul_cuda_template(n, m, k, dtype, *((True,) if transpose_b else ()))
    defaults = (default_block(n, m), 8, 16, 4, True, False)
    block, thread_tile, k_tile, vector, unroll, double_buffer = (
        d if v is None else v for v, d in zip(given, defaults)
    )
    return _schedule_matmul_cuda(
        n, m, k, dtype, block, thread_tile, k_tile, vector, unroll, double_buffer, transpose_b
    )


def _schedule_matmul_cuda(
    n: int,
    m: int,
    k: int,
    dtype: str,
    block: int,
    thread_tile: int,
    k_tile: int,
    vector: int,
    unroll: bool,
    double_buffer: bool,
    transpose_b: bool = False,
):
    """The classic shared-memory GEMM (with `transpose_b`, B is (m, k) and C = A @ B.T).

    A block computes a `block` x `block` tile of C with (block/thread_tile)^2 threads, each holding
    a `thread_tile` x `thread_tile` accumulator in registers. The k loop walks `k_tile`-deep slices
    of A and B staged in shared memory; A is stored transposed there (`At[k, i]`, rows padded
    against bank conflicts) so that each thread reads its column sliver of A and row sliver of B
    with `vector`-wide (float4) shared loads into registers before the outer-product update.

    When the block divides the matrix, a thread's columns are two `vector`-wide strips half a
    block apart (`tx*4` and `64 + tx*4`), not 8 adjacent columns: then the float4 shared loads of
    a quarter warp cover 128 contiguous bytes and never collide in a bank. The accumulator is
    declared in that thread-major column order (`Cp`) and the output stage un-permutes it.
    """
    A = te.placeholder((n, k), dtype=dtype, name="A")
    B = te.placeholder((m, k) if transpose_b else (k, m), dtype=dtype, name="B")
    At = te.compute((k, n), lambda kk, i: A[i, kk], name="At")  # staged transposed
    Bs = te.compute((k, m), lambda kk, j: B[j, kk] if transpose_b else B[kk, j], name="Bs")
    strips = m % block == 0 and thread_tile == 2 * vector  # two strips of `vector` columns
    threads = block // thread_tile
    half = block // 2

    def perm(jp):  # column of a thread-major index: thread t's r-th column
        t, r = jp % block // thread_tile, jp % thread_tile
        return jp // block * block + r // vector * half + t * vector + r % vector

    def unperm(j):  # the thread-major index of column j
        h, rest = j % block // half, j % half
        return j // block * block + rest // vector * thread_tile + h * vector + rest % vector

    Bp = te.compute((k, m), lambda kk, jp: Bs[kk, perm(jp)] if strips else Bs[kk, jp], name="Bp")
    Cp = product(n, m, k, lambda i, r: At[r, i], lambda r, jp: Bp[r, jp], name="Cp")
    C = te.compute((n, m), lambda i, j: Cp[i, unperm(j)] if strips else Cp[i, j], name="C")
    s = te.create_schedule(C.op)
    s[At].set_scope("shared")
    s[Bs].set_scope("shared")
    s[Bp].set_scope("local")
    s[Cp].set_scope("local")
    AL = s.cache_read(At, "local", [Cp])
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, block, block)
    tyo, tyi = s[C].split(ii, factor=thread_tile)
    if strips:
        h, j_half = s[C].split(ji, factor=half)
        txo, txi = s[C].split(j_half, factor=vector)
        s[C].reorder(io, jo, tyo, txo, tyi, h, txi)
        s[C].unroll(h)
    else:
        txo, txi = s[C].split(ji, factor=thread_tile)
        s[C].reorder(io, jo, tyo, txo, tyi, txi)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    s[C].bind(tyo, te.thread_axis("threadIdx.y"))
    s[C].bind(txo, te.thread_axis("threadIdx.x"))
    s[C].unroll(tyi)
    s[C].vectorize(txi)
    s[Cp].compute_at(s[C], txo)
    ci, cj = s[Cp].op.axis
    (ck,) = s[Cp].op.reduce_axis
    ko, ki = s[Cp].split(ck, factor=k_tile)
    s[Cp].reorder(ko, ki, ci, cj)
    if unroll:
        s[Cp].unroll(ki)
    s[Cp].unroll(ci)
    s[Cp].unroll(cj)
    s[AL].compute_at(s[Cp], ki)
    s[Bp].compute_at(s[Cp], ki)
    s[AL].unroll(s[AL].op.axis[0])
    s[AL].vectorize(s[AL].op.axis[1])
    bk, bj = s[Bp].op.axis
    bjo, bji = s[Bp].split(bj, factor=vector)  # float4 strips of B from shared memory
    s[Bp].unroll(bk)
    s[Bp].unroll(bjo)
    s[Bp].vectorize(bji)
    s[At].compute_at(s[Cp], ko)
    s[Bs].compute_at(s[Cp], ko)
    if double_buffer:  # fill the next k slice while computing on this one
        s[At].double_buffer()
        s[Bs].double_buffer()
    s[At].storage_align(
        s[At].op.axis[0], 32, vector
    )  # pad rows: transposed stores spread over banks
    # cooperative fetch: each thread loads `vector` consecutive elements of a row of A or B
    kk, ii = s[At].op.axis
    s[At].reorder(ii, kk)
    fused_a = s[At].fuse(ii, kk)
    for stage, fused in ((s[At], fused_a), (s[Bs], s[Bs].fuse(*s[Bs].op.axis))):
        rest, vec = stage.split(fused, factor=vector)
        rest, tx_part = stage.split(rest, factor=threads)
        rest, ty_part = stage.split(rest, factor=threads)
        stage.bind(ty_part, te.thread_axis("threadIdx.y"))
        stage.bind(tx_part, te.thread_axis("threadIdx.x"))
        stage.vectorize(vec)
    return s, [A, B, C]


def schedule_softmax_cuda(
    n: int, m: int, dtype: str = "float32", threads: int = 256, vector: int = 4
):
    """One block per row, in one kernel: the row is read from memory once into shared memory
    (float4 loads), then a cross-thread max and sum (warp shuffles) and the scaled exp are
    computed from there."""
    x, y = softmax(n, m, dtype)
    e = y.op.input_tensors[0]
    row_sum = y.op.input_tensors[1]
    row_max = e.op.input_tensors[1]
    s = te.create_schedule(y.op)
    row = s.cache_read(x, "shared", [row_max, e])
    s[e].compute_inline()
    i, j = s[y].op.axis
    jo, ji = s[y].split(j, factor=threads)
    s[y].bind(i, te.thread_axis("blockIdx.x"))
    s[y].bind(ji, te.thread_axis("threadIdx.x"))
    s[y].reorder(i, ji, jo)
    for red in (row_sum, row_max):
        s[red].set_scope("shared")  # written by one thread, read by the whole block
        s[red].compute_at(s[y], i)
        (k,) = s[red].op.reduce_axis
        ko, ki = s[red].split(k, factor=threads)
        s[red].bind(ki, te.thread_axis("threadIdx.x"))
    s[row].compute_at(s[y], i)
    _, rj = s[row].op.axis
    rest, vec = s[row].split(rj, factor=vector)
    rest, tx = s[row].split(rest, factor=threads)
    s[row].reorder(tx, rest, vec)
    s[row].bind(tx, te.thread_axis("threadIdx.x"))
    s[row].vectorize(vec)
    return s, [x, y]
