"""CPU dot-product instructions through `tensorize`: int8 GEMM with AVX512-VNNI (`vpdpbusd`,
uint8 x int8 -> int32) and bfloat16 GEMM with AVX512-BF16 (`vdpbf16ps`, -> float32).

Each is an extern C micro-kernel (compiled with tf.runtime.compile_c for the host) computing
C[mr, nr] (+)= A[mr, kc] @ B[kc, nr] on row-major tiles, interleaving B's 4 (2) rows into
the instruction's lane groups on the fly: for nr a multiple of 64 with two-source permutes
(vpermt2b / vpermt2w: 8 (4) per 16 dot instructions, 4 x 4 accumulators in registers), else
16 columns at a time with zero-extends and shifts. Where the compiler or host lacks the feature the same
function is plain C, so results are the same everywhere (`has_vnni` / `has_bf16` say which).
"""

from __future__ import annotations

import functools

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.target import Target

NR = 16  # one 512-bit vector of int32 / float32: tiles are whole vectors wide

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

int tf_dot_reset_i32(int32_t* c, int ldc, int mr, int nr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, nr * sizeof(int32_t));
  return 0;
}

int tf_dot_reset_f32(float* c, int ldc, int mr, int nr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, nr * sizeof(float));
  return 0;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
#define TF_VNNI_WIDE 1
/* C[rows <= 4, 64] += A[rows, kc] @ B[kc, 64]: per 4 rows of B, 8 two-source byte / word
   permutes build the 4 vectors of (k, k+1, k+2, k+3) quads for 64 columns in order; each A
   quad broadcast feeds 4 vpdpbusd. 16 accumulators stay in registers. */
static inline __attribute__((always_inline)) void tf_vnni_tile64(
    int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldb, int ldc, int rows, int kc) {
  __m512i lo8, hi8, lo16, hi16;
  {
    int8_t l8[64], h8[64];
    int16_t l16[32], h16[32];
    for (int p = 0; p < 64; ++p) {
      l8[p] = (int8_t)((p / 2) | ((p % 2) << 6));
      h8[p] = (int8_t)((32 + p / 2) | ((p % 2) << 6));
    }
    for (int q = 0; q < 32; ++q) {
      l16[q] = (int16_t)((q / 2) | ((q % 2) << 5));
      h16[q] = (int16_t)((16 + q / 2) | ((q % 2) << 5));
    }
    lo8 = _mm512_loadu_si512(l8);
    hi8 = _mm512_loadu_si512(h8);
    lo16 = _mm512_loadu_si512(l16);
    hi16 = _mm512_loadu_si512(h16);
  }
  __m512i acc[4][4];
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_loadu_si512(c + (long)i * ldc + 16 * v);
  for (int k = 0; k < kc; k += 4) {
    const int8_t* r = b + (long)k * ldb;
    const __m512i r0 = _mm512_loadu_si512(r), r1 = _mm512_loadu_si512(r + ldb);
    const __m512i r2 = _mm512_loadu_si512(r + 2 * ldb), r3 = _mm512_loadu_si512(r + 3 * ldb);
    const __m512i t0 = _mm512_permutex2var_epi8(r0, lo8, r1);  /* (k, k+1) of columns 0..31 */
    const __m512i t1 = _mm512_permutex2var_epi8(r0, hi8, r1);  /* 32..63 */
    const __m512i t2 = _mm512_permutex2var_epi8(r2, lo8, r3);
    const __m512i t3 = _mm512_permutex2var_epi8(r2, hi8, r3);
    __m512i u[4];
    u[0] = _mm512_permutex2var_epi16(t0, lo16, t2);  /* quads of columns 0..15 */
    u[1] = _mm512_permutex2var_epi16(t0, hi16, t2);
    u[2] = _mm512_permutex2var_epi16(t1, lo16, t3);
    u[3] = _mm512_permutex2var_epi16(t1, hi16, t3);
    for (int i = 0; i < rows; ++i) {
      int32_t quad;
      memcpy(&quad, a + (long)i * lda + k, 4);
      const __m512i av = _mm512_set1_epi32(quad);
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], av, u[v]);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < 4; ++v) _mm512_storeu_si512(c + (long)i * ldc + 16 * v, acc[i][v]);
}
#endif

/* C[mr, nr] += A[mr, kc] (uint8) @ B[kc, nr] (int8), int32; kc % 4 == 0, nr % 16 == 0 */
int tf_vnni_update(int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldb, int ldc,
                   int mr, int nr, int kc) {
#if defined(TF_VNNI_WIDE)
  if (nr % 64 == 0) {
    for (int j0 = 0; j0 < nr; j0 += 64)
      for (int i0 = 0; i0 < mr; i0 += 4) {
        int32_t* ct = c + (long)i0 * ldc + j0;
        const uint8_t* at = a + (long)i0 * lda;
        if (mr - i0 >= 4)
          tf_vnni_tile64(ct, at, b + j0, lda, ldb, ldc, 4, kc);
        else
          tf_vnni_tile64(ct, at, b + j0, lda, ldb, ldc, mr - i0, kc);
      }
    return 0;
  }
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  for (int j0 = 0; j0 < nr; j0 += 16)
  for (int i0 = 0; i0 < mr; i0 += 8) {
    const int rows = mr - i0 < 8 ? mr - i0 : 8;
    __m512i acc[8];
    for (int i = 0; i < rows; ++i) acc[i] = _mm512_loadu_si512(c + (long)(i0 + i) * ldc + j0);
    for (int k = 0; k < kc; k += 4) {
      const int8_t* r = b + (long)k * ldb + j0;
      __m512i bv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)r));
      bv = _mm512_or_si512(bv, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + ldb))), 8));
      bv = _mm512_or_si512(bv, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + 2 * ldb))), 16));
      bv = _mm512_or_si512(bv, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(r + 3 * ldb))), 24));
      for (int i = 0; i < rows; ++i) {
        int32_t quad;
        memcpy(&quad, a + (long)(i0 + i) * lda + k, 4);
        acc[i] = _mm512_dpbusd_epi32(acc[i], _mm512_set1_epi32(quad), bv);
      }
    }
    for (int i = 0; i < rows; ++i) _mm512_storeu_si512(c + (long)(i0 + i) * ldc + j0, acc[i]);
  }
#else
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < nr; ++j)
        c[(long)i * ldc + j] += (int32_t)a[(long)i * lda + k] * (int32_t)b[(long)k * ldb + j];
#endif
  return 0;
}

static float tf_bf16_to_f32(uint16_t x) {
  uint32_t bits = (uint32_t)x << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
/* C[rows <= 4, 64] += A[rows, kc] @ B[kc, 64] on bfloat16 bits: per 2 rows of B, 4 two-source
   word permutes build the (k, k+1) pairs of 64 columns in order; each A pair broadcast feeds 4
   vdpbf16ps. */
static inline __attribute__((always_inline)) void tf_bf16_tile64(
    float* c, const uint16_t* a, const uint16_t* b, int lda, int ldb, int ldc, int rows, int kc) {
  __m512i lo16, hi16;
  {
    int16_t l16[32], h16[32];
    for (int q = 0; q < 32; ++q) {
      l16[q] = (int16_t)((q / 2) | ((q % 2) << 5));
      h16[q] = (int16_t)((16 + q / 2) | ((q % 2) << 5));
    }
    lo16 = _mm512_loadu_si512(l16);
    hi16 = _mm512_loadu_si512(h16);
  }
  __m512 acc[4][4];
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_loadu_ps(c + (long)i * ldc + 16 * v);
  for (int k = 0; k < kc; k += 2) {
    const uint16_t* r = b + (long)k * ldb;
    const __m512i r0a = _mm512_loadu_si512(r), r0b = _mm512_loadu_si512(r + 32);
    const __m512i r1a = _mm512_loadu_si512(r + ldb), r1b = _mm512_loadu_si512(r + ldb + 32);
    __m512bh u[4];
    u[0] = (__m512bh)_mm512_permutex2var_epi16(r0a, lo16, r1a);  /* pairs of columns 0..15 */
    u[1] = (__m512bh)_mm512_permutex2var_epi16(r0a, hi16, r1a);
    u[2] = (__m512bh)_mm512_permutex2var_epi16(r0b, lo16, r1b);
    u[3] = (__m512bh)_mm512_permutex2var_epi16(r0b, hi16, r1b);
    for (int i = 0; i < rows; ++i) {
      int32_t pair;
      memcpy(&pair, a + (long)i * lda + k, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, u[v]);
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(c + (long)i * ldc + 16 * v, acc[i][v]);
}
#endif

/* C[mr, nr] += A[mr, kc] @ B[kc, nr] on bfloat16 bits, float32; kc % 2 == 0, nr % 16 == 0 */
int tf_bf16dot_update(float* c, const uint16_t* a, const uint16_t* b, int lda, int ldb, int ldc,
                      int mr, int nr, int kc) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  if (nr % 64 == 0) {
    for (int j0 = 0; j0 < nr; j0 += 64)
      for (int i0 = 0; i0 < mr; i0 += 4) {
        float* ct = c + (long)i0 * ldc + j0;
        const uint16_t* at = a + (long)i0 * lda;
        if (mr - i0 >= 4)
          tf_bf16_tile64(ct, at, b + j0, lda, ldb, ldc, 4, kc);
        else
          tf_bf16_tile64(ct, at, b + j0, lda, ldb, ldc, mr - i0, kc);
      }
    return 0;
  }
  for (int j0 = 0; j0 < nr; j0 += 16)
  for (int i0 = 0; i0 < mr; i0 += 8) {
    const int rows = mr - i0 < 8 ? mr - i0 : 8;
    __m512 acc[8];
    for (int i = 0; i < rows; ++i) acc[i] = _mm512_loadu_ps(c + (long)(i0 + i) * ldc + j0);
    for (int k = 0; k < kc; k += 2) {
      const uint16_t* r = b + (long)k * ldb + j0;
      __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)r));
      __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(r + ldb)));
      __m512bh bv = (__m512bh)_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      for (int i = 0; i < rows; ++i) {
        int32_t pair;
        memcpy(&pair, a + (long)(i0 + i) * lda + k, 4);
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(pair), bv);
      }
    }
    for (int i = 0; i < rows; ++i) _mm512_storeu_ps(c + (long)(i0 + i) * ldc + j0, acc[i]);
  }
#else
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < nr; ++j)
        c[(long)i * ldc + j] += tf_bf16_to_f32(a[(long)i * lda + k]) *
                                tf_bf16_to_f32(b[(long)k * ldb + j]);
#endif
  return 0;
}
"""

KINDS = {  # kind: (A dtype, B dtype, accumulator dtype, k multiple, update fn, feature)
    "int8": ("uint8", "int8", "int32", 4, "tf_vnni_update", "avx512vnni"),
    "bfloat16": ("bfloat16", "bfloat16", "float32", 2, "tf_bf16dot_update", "avx512bf16"),
}


def compile_options(target: Target | None = None) -> tuple[str, ...]:
    """Compiler flags for the micro-kernels: the target's -mcpu (default: this host)."""
    mcpu = (target.mcpu if target is not None else "") or "native"
    return ("-O3", f"-march={mcpu}")


def has_feature(kind: str, target: Target | None = None) -> bool:
    """Does `target` (default: this host) have the instruction `kind` uses?"""
    target = target or Target("llvm")
    return KINDS[kind][5] in target.cpu_features


@functools.cache
def load_microkernels(options: tuple[str, ...] | None = None) -> str:
    """Compile and load the micro-kernels (once); the library's path."""
    from tensorforge.runtime import compile_c

    return compile_c(_SOURCE, options or compile_options())


def source() -> str:
    return _SOURCE


def dot_intrin(kind: str, mr: int, kc: int, nr: int = NR):
    """C[mr, nr] (+)= A[mr, kc] @ B[kc, nr] accumulated in int32 (int8) or float32 (bfloat16);
    nr a multiple of 16 (of 64: the wide micro-kernel, B's rows interleaved by permutes)."""
    if kind not in KINDS:
        raise ScheduleError(f"dot_intrin: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    a_dtype, b_dtype, acc, step, update_fn, _ = KINDS[kind]
    if kc % step:
        raise ScheduleError(f"dot_intrin: {kind} needs kc a multiple of {step}, got {kc}")
    if nr % NR or nr <= 0:
        raise ScheduleError(f"dot_intrin: nr must be a multiple of {NR}, got {nr}")
    a = te.placeholder((mr, kc), a_dtype, name="a")
    b = te.placeholder((kc, nr), b_dtype, name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mr, nr), lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k), name="c")  # fmt: skip
    binds = {
        t: tir.decl_buffer(t.shape, t.dtype, t.name.upper(), strides=[te.var(f"ld{t.name}"), 1])
        for t in (a, b, c)
    }
    reset_fn = "tf_dot_reset_i32" if acc == "int32" else "tf_dot_reset_f32"

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tir.call_extern("int32", reset_fn, cc.access_ptr("w"), cc.strides[0], mr, nr)
        update = tir.call_extern(
            "int32", update_fn, cc.access_ptr("rw"), aa.access_ptr("r"), bb.access_ptr("r"),
            aa.strides[0], bb.strides[0], cc.strides[0], mr, nr, kc,
        )  # fmt: skip
        return [reset, update], reset, update

    return te.decl_tensor_intrin(c.op, fintrin, name=f"{kind}_dot_{mr}x{nr}x{kc}", binds=binds)


def dot_gemm(m: int, n: int, k: int, kind: str):
    """C = A @ B with A (m, k), B (k, n) of the kind's input dtypes, accumulated in C's."""
    a_dtype, b_dtype, acc, *_ = KINDS[kind]
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((k, n), b_dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype(acc) * B[r, j].astype(acc), axis=r), name="C")  # fmt: skip
    return A, B, C


def schedule_dot_gemm(
    m: int,
    n: int,
    k: int,
    kind: str,
    mr: int = 8,
    kc: int = 256,
    parallel=True,
    nr=None,
    order: str = "rows",
):
    """The GEMM tensorized with `dot_intrin`: mr x nr tiles (nr: 64 where n allows, else 16),
    k in blocks of kc (m, n, k must be multiples of mr, 16 and kc: the intrinsic needs whole
    tiles). order "rows": blocks of rows outermost (in parallel), each sweeping all of B;
    "panels": B's column panels outermost (in parallel), then k blocks, then rows, so a kc x nr
    block of B stays in cache while every row block uses it. Returns (schedule, [A, B, C])."""
    if order not in ("rows", "panels"):
        raise ScheduleError(f"schedule_dot_gemm: order must be 'rows' or 'panels', got {order!r}")
    kc = min(kc, k)
    for name, size, tile in (("m", m, mr), ("n", n, NR), ("k", k, kc)):
        if size % tile:
            raise ScheduleError(f"schedule_dot_gemm: {name} = {size} is not a multiple of {tile}")
    nr = nr or (64 if n % 64 == 0 else NR)
    A, B, C = dot_gemm(m, n, k, kind)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, mr, nr)
    ko, ki = s[C].split(r, factor=kc)
    if order == "rows":
        s[C].reorder(io, jo, ko, ii, ji, ki)
    else:
        s[C].reorder(jo, ko, io, ii, ji, ki)
    s[C].tensorize(ii, dot_intrin(kind, mr, kc, nr))
    if parallel:
        s[C].parallel(io if order == "rows" else jo)
    return s, [A, B, C]
