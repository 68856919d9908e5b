"""CPU dot-product instructions through `tensorize`: int8 GEMM (uint8 x int8 -> int32) with
AVX512-VNNI `vpdpbusd` or AMX `tdpbusd`, and bfloat16 GEMM (-> float32) with AVX512-BF16
`vdpbf16ps` or AMX `tdpbf16ps`.

B is first packed (a te.compute stage) into VNNI panels `packedB[n / nr][k / step][nr][step]`:
the `step` consecutive k of a column (4 int8, 2 bfloat16) share one 32-bit lane, so one row of a
panel is the micro-kernel's B vector (and an AMX B tile row) as it is. The product reads the
panels and is tensorized with `dot_intrin`, whose micro-kernel (ops/cpu_dot_kernels.py) keeps
its tile of C in registers (AVX-512) or tiles (AMX). Sizes that are not whole tiles are zero-
padded (A's rows and k, B's columns and k) and the padded product copied out. Hosts without the
features run the same functions on AVX2 (int16 multiply-adds, float FMAs), else in plain C.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.ops import cpu_dot_kernels
from tensorforge.target import Target, as_target


@dataclass(frozen=True)
class DotKind:
    """One kind of dot product: its dtypes, B's lane grouping and its C functions."""

    a_dtype: str
    b_dtype: str
    acc_dtype: str
    step: int  # consecutive k in one 32-bit lane of B
    function: str  # the micro-kernel, tagged by cpu_dot_kernels.tag
    reset: str
    pack: str
    feature: str  # the AVX-512 feature of its instruction
    amx_feature: str
    amx_k: int  # k per AMX tile (kc must be a multiple for the AMX path)


KINDS = {
    "int8": DotKind(
        a_dtype="uint8",
        b_dtype="int8",
        acc_dtype="int32",
        step=4,
        function="tf_dot_int8",
        reset="tf_dot_reset_i32",
        pack="tf_pack_int8",
        feature="avx512vnni",
        amx_feature="amx-int8",
        amx_k=64,
    ),
    "bfloat16": DotKind(
        a_dtype="bfloat16",
        b_dtype="bfloat16",
        acc_dtype="float32",
        step=2,
        function="tf_dot_bf16",
        reset="tf_dot_reset_f32",
        pack="tf_pack_bf16",
        feature="avx512bf16",
        amx_feature="amx-bf16",
        amx_k=32,
    ),
}


def _kind(kind: str, where: str) -> DotKind:
    if kind not in KINDS:
        raise ScheduleError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return KINDS[kind]


def has_feature(kind: str, target: Target | None = None) -> bool:
    """Does `target` (default: the current one, else this host) have the AVX-512 instruction
    `kind` uses?"""
    return KINDS[kind].feature in as_target(target).cpu_features


def has_amx(kind: str, target: Target | None = None) -> bool:
    """Does `target` (default: the current one, else this host) have AMX tiles for `kind`?
    (The OS must also grant them at run time; where it does not, the micro-kernel takes its
    register-tile path.)"""
    features = as_target(target).cpu_features
    return "amx-tile" in features and KINDS[kind].amx_feature in features


def load_microkernels(target: Target | None = None) -> str:
    """Compile and load the micro-kernels for `target` (once); their symbols' tag."""
    return cpu_dot_kernels.load(target)


def source() -> str:
    return cpu_dot_kernels.SOURCE


def round_up(x: int, to: int) -> int:
    return (x + to - 1) // to * to


@dataclass(frozen=True)
class DotTiles:
    """The blocking: `mr` x `nr` tiles of C, each one call of the micro-kernel per `kc` block of
    k. `order` "rows" runs row blocks outermost (in parallel), then B's column panels, then k
    blocks, so an mr x kc block of A stays in cache while the panels stream past it; "panels"
    runs panels outermost, then k blocks, then rows (a kc x nr panel stays in L1 while every
    row block reads it). `amx`: the micro-kernel may use AMX tiles (mr a multiple of 16)."""

    mr: int
    nr: int
    kc: int
    amx: bool = False
    order: str = "rows"

    @staticmethod
    def for_target(kind: str, target: Target | None = None, amx: bool | None = None) -> DotTiles:
        """AMX (where the target has it, unless `amx` is False): 128 x 64 tiles (32 x 32 blocks
        of 2 x 2 C tiles), kc as long as an eighth of L2 holds A's 32 x kc rows and B's
        kc x 64 panel (k blocks reload the C tiles), 128 rows so B's panels stream from L3 once
        per 128 rows, not per 32 (1024^3 bf16 +20-25%). AVX-512: 48 x 64 tiles (8 register
        tiles of 6 rows x 4 zmm), kc as long as A's 48 x kc block fits in 3/4 of L1.
        (1024^3 on Sapphire Rapids-class: rows order 1.2-1.4x panels; kc 512 vs 256 int8 +5%.)"""
        spec = _kind(kind, "DotTiles.for_target")
        itemsize = 1 if spec.a_dtype == "uint8" else 2
        l1, l2 = as_target(target).cache_bytes
        if has_amx(kind, target) if amx is None else amx:
            kc = _power_of_two_below(l2 // 8 // (itemsize * (32 + 64)))
            return DotTiles(mr=128, nr=64, kc=max(spec.amx_k, kc), amx=True)
        kc = _power_of_two_below(l1 * 3 // 4 // (itemsize * 48))
        return DotTiles(mr=48, nr=64, kc=max(spec.step, kc))

    def fitted(self, m: int, n: int, k: int, kind: str) -> DotTiles:
        """The tiles for an m x n x k problem: no more rows (in 16s) or columns than it has,
        and k in equal blocks (balanced_kc) of whole AMX tiles where `amx`."""
        spec = _kind(kind, "DotTiles.fitted")
        return replace(
            self,
            mr=min(self.mr, round_up(m, 16)),
            nr=min(self.nr, round_up(n, 16)),
            kc=balanced_kc(k, self.kc, spec.amx_k if self.amx else spec.step),
        )


def _power_of_two_below(x: int) -> int:
    return 1 << (max(x, 1).bit_length() - 1)


def dot_intrin(kind: str, mr: int, kc: int, nr: int = 64, target: Target | None = None, amx: bool = False, rows=None):  # fmt: skip
    """C[mr, nr] (+)= A[mr, kc] @ B accumulated in int32 (int8) or float32 (bfloat16), with B
    read from a VNNI panel b[kc / step][nr][step]; nr a multiple of 16. The calls name the
    micro-kernels compiled for `target` (load_microkernels(target) before building).

    `rows` (an expression of the loops that enclose the tensorized nest, such as
    min(mr, n - mr io) for n rows known only at run time and the row tile io): the rows the
    micro-kernel computes, of the mr; A's rows past them are never read and C's never written,
    so a last partial tile needs no padding (C's tile is whole: its reset clears all mr)."""
    spec = _kind(kind, "dot_intrin")
    if kc % spec.step or kc <= 0:
        raise ScheduleError(f"dot_intrin: {kind} needs kc a multiple of {spec.step}, got {kc}")
    if nr % 16 or nr <= 0:
        raise ScheduleError(f"dot_intrin: nr must be a multiple of 16, got {nr}")
    step, acc = spec.step, spec.acc_dtype
    a = te.placeholder((mr, kc), spec.a_dtype, name="a")
    b = te.placeholder((kc // step, nr, step), spec.b_dtype, name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute(
        (mr, nr),
        lambda i, j: te.sum(a[i, k].astype(acc) * b[k // step, j, k % step].astype(acc), axis=k),
        name="c",
    )
    binds = {
        a: tir.decl_buffer(a.shape, a.dtype, "A", strides=[te.var("lda"), 1]),
        c: tir.decl_buffer(c.shape, c.dtype, "C", strides=[te.var("ldc"), 1]),
    }
    tag = cpu_dot_kernels.tag(target)
    use_amx = int(amx and has_amx(kind, target))

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs

        count = mr if rows is None else rows

        def dot(init: int):  # init: C = A @ B, without reading C (no reset pass over it)
            return tir.call_extern(
                "int32", spec.function + tag, cc.access_ptr("w" if init else "rw"),
                aa.access_ptr("r"), bb.access_ptr("r"), aa.strides[0], cc.strides[0], count, nr,
                kc, use_amx, init,
            )  # fmt: skip

        reset = tir.call_extern("int32", spec.reset + tag, cc.access_ptr("w"), cc.strides[0], mr, nr)  # fmt: skip
        return dot(1), reset, dot(0)

    return te.decl_tensor_intrin(c.op, fintrin, name=f"{kind}_dot_{mr}x{nr}x{kc}", binds=binds)


def pack_intrin(kind: str, groups: int, nr: int, target: Target | None = None):
    """One VNNI panel: out[q, x, t] = b[q * step + t, x] for `groups` k-groups of `nr` columns
    (B's rows ldb apart), the micro-kernels' `tf_pack_*` for `target`."""
    spec = _kind(kind, "pack_intrin")
    if nr % 16 or nr <= 0:
        raise ScheduleError(f"pack_intrin: nr must be a multiple of 16, got {nr}")
    step = spec.step
    b = te.placeholder((groups * step, nr), spec.b_dtype, name="b")
    out = te.compute((groups, nr, step), lambda q, x, t: b[q * step + t, x], name="panel")
    binds = {b: tir.decl_buffer(b.shape, b.dtype, "B", strides=[te.var("ldb"), 1])}
    function = spec.pack + cpu_dot_kernels.tag(target)

    def fintrin(ins, outs):
        (bb,) = ins
        (panel,) = outs
        return tir.call_extern(
            "int32", function, panel.access_ptr("w"), bb.access_ptr("r"), bb.strides[0], groups, nr
        )

    return te.decl_tensor_intrin(out.op, fintrin, name=f"{kind}_pack_{groups}x{nr}", binds=binds)


def dot_gemm(m: int, n: int, k: int, kind: str, tiles: DotTiles):
    """C = A @ B with A (m, k), B (k, n) of the kind's input dtypes, accumulated in C's dtype.

    Stages: `padA` / `padB` (A / B zero-padded to whole tiles; None when whole already),
    `packedB` (the VNNI panels of B or padB), `product` (the padded product, read by the
    tensorized micro-kernel) and `C` (the product's m x n corner; the product itself when
    nothing is padded). Returns (A, B, padA, padB, packedB, product, C)."""
    spec = _kind(kind, "dot_gemm")
    step, acc, nr = spec.step, spec.acc_dtype, tiles.nr
    mp, np_, kp = round_up(m, tiles.mr), round_up(n, nr), round_up(k, tiles.kc)
    A = te.placeholder((m, k), spec.a_dtype, name="A")
    B = te.placeholder((k, n), spec.b_dtype, name="B")
    padA = _padded(A, (mp, kp), "padA")
    padB = _padded(B, (kp, np_), "padB")
    b_read = padB if padB is not None else B
    packedB = te.compute(
        (np_ // nr, kp // step, nr, step),
        lambda p, q, x, t: b_read[q * step + t, p * nr + x],
        name="packedB",
    )
    a_read = padA if padA is not None else A
    r = te.reduce_axis((0, kp), name="k")
    padded = (mp, np_) != (m, n)
    product = te.compute(
        (mp, np_),
        lambda i, j: te.sum(
            a_read[i, r].astype(acc) * packedB[j // nr, r // step, j % nr, r % step].astype(acc),
            axis=r,
        ),
        name="product" if padded else "C",
    )
    C = te.compute((m, n), lambda i, j: product[i, j], name="C") if padded else product
    return A, B, padA, padB, packedB, product, C


def _padded(X: te.Tensor, shape: tuple[int, int], name: str) -> te.Tensor | None:
    """X zero-padded to `shape` (None if it has that shape)."""
    rows, cols = (d.value for d in X.shape)
    if (rows, cols) == shape:
        return None
    # NOTE: X is read unclamped under the guard: vectorized, that is one masked contiguous load
    # (min(ramp, cols - 1) in the index made it a gather: 1000^2 uint8 1.9 ms -> 0.06 ms)
    zero = te.const(0, X.dtype)
    return te.compute(
        shape,
        lambda i, j: te.if_then_else(te.all(i < rows, j < cols), X[i, j], zero),
        name=name,
    )


def balanced_kc(k: int, kc: int, multiple: int) -> int:
    """The k block for k: as many blocks as `kc` needs, of equal length rounded up to
    `multiple` (k = 1031, kc = 512: 3 blocks of 344, padded k 1032 rather than 1536)."""
    blocks = -(-k // kc)
    return round_up(-(-k // blocks), multiple)


def schedule_dot_gemm(
    m: int,
    n: int,
    k: int,
    kind: str,
    target: Target | None = None,
    tiles: DotTiles | None = None,
    parallel: bool = True,
):
    """The GEMM with B packed into VNNI panels and the product tensorized with `dot_intrin`
    (tiles: DotTiles.for_target's unless given). Any m, n, k: partial tiles are zero-padded.
    Returns (schedule, [A, B, C])."""
    spec = _kind(kind, "schedule_dot_gemm")
    tiles = tiles or DotTiles.for_target(kind, target)
    if tiles.order not in ("rows", "panels"):
        raise ScheduleError(f"schedule_dot_gemm: order must be 'rows' or 'panels', got {tiles.order!r}")  # fmt: skip
    if tiles.nr % 16 or tiles.kc % spec.step:
        raise ScheduleError(
            f"schedule_dot_gemm: nr = {tiles.nr} must be a multiple of 16 and kc = {tiles.kc} "
            f"of {spec.step}"
        )
    tiles = tiles.fitted(m, n, k, kind)
    A, B, padA, padB, packedB, product, C = dot_gemm(m, n, k, kind, tiles)
    s = te.create_schedule(C.op)
    pack = pack_intrin(kind, round_up(k, tiles.kc) // spec.step, tiles.nr, target)
    _schedule_packing(s, padA, padB, packedB, pack, parallel)
    i, j = s[product].op.axis
    (r,) = s[product].op.reduce_axis
    io, jo, ii, ji = s[product].tile(i, j, tiles.mr, tiles.nr)
    if tiles.kc >= round_up(k, spec.step):  # one k block: the intrinsic's body initializes C
        s[product].reorder(*((io, jo) if tiles.order == "rows" else (jo, io)), ii, ji, r)
    else:  # k blocks outside: C's tile reset first, then accumulated block by block
        ko, ki = s[product].split(r, factor=tiles.kc)
        if tiles.order == "rows":
            s[product].reorder(io, jo, ko, ii, ji, ki)
        else:
            s[product].reorder(jo, ko, io, ii, ji, ki)
    intrin = dot_intrin(kind, tiles.mr, tiles.kc, tiles.nr, target, tiles.amx)
    s[product].tensorize(ii, intrin)
    if parallel:
        s[product].parallel(io if tiles.order == "rows" else jo)
    if product is not C:  # the m x n corner, row by row in vectors
        ci, cj = s[C].op.axis
        cjo, cji = s[C].split(cj, factor=16)
        s[C].vectorize(cji)
        if parallel:
            s[C].parallel(ci)
    return s, [A, B, C]


def _schedule_packing(s, padA, padB, packedB, pack, parallel: bool) -> None:
    """packedB panel by panel, each one `pack` call; padA / padB row by row in vectors."""
    p, q, _, _ = s[packedB].op.axis
    s[packedB].tensorize(q, pack)
    if parallel:
        s[packedB].parallel(p)
    for padded in (padA, padB):
        if padded is not None:
            rows, cols = s[padded].op.axis
            _, lanes = s[padded].split(cols, factor=64)
            s[padded].vectorize(lanes)
            if parallel:
                s[padded].parallel(rows)
