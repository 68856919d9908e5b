"""CPU dot-product instructions through `tensorize`: int8 GEMM with AVX512-VNNI (`vpdpbusd`,
uint8 x int8 -> int32) and bfloat16 GEMM with AVX512-BF16 (`vdpbf16ps`, -> float32).

Each is an extern C micro-kernel (compiled with tf.runtime.compile_c for the host) computing
C[mr, 16] (+)= A[mr, kc] @ B[kc, 16] on row-major tiles, interleaving B's 4 (2) rows into
the instruction's lane groups on the fly. Where the compiler or host lacks the feature the same
function is plain C, so results are the same everywhere (`has_vnni` / `has_bf16` say which).
"""

from __future__ import annotations

import functools

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.target import Target

NR = 16  # one 512-bit vector of int32 / float32

_SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

int tf_dot_reset_i32(int32_t* c, int ldc, int mr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, 16 * sizeof(int32_t));
  return 0;
}

int tf_dot_reset_f32(float* c, int ldc, int mr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, 16 * sizeof(float));
  return 0;
}

/* C[mr, 16] += A[mr, kc] (uint8) @ B[kc, 16] (int8), int32; kc % 4 == 0 */
int tf_vnni_update(int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldb, int ldc,
                   int mr, int kc) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  for (int i0 = 0; i0 < mr; i0 += 8) {
    const int rows = mr - i0 < 8 ? mr - i0 : 8;
    __m512i acc[8];
    for (int i = 0; i < rows; ++i) acc[i] = _mm512_loadu_si512(c + (long)(i0 + i) * ldc);
    for (int k = 0; k < kc; k += 4) {
      const int8_t* r = b + (long)k * ldb;
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
    for (int i = 0; i < rows; ++i) _mm512_storeu_si512(c + (long)(i0 + i) * ldc, acc[i]);
  }
#else
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < 16; ++j)
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

/* C[mr, 16] += A[mr, kc] @ B[kc, 16] on bfloat16 bits, float32; kc % 2 == 0 */
int tf_bf16dot_update(float* c, const uint16_t* a, const uint16_t* b, int lda, int ldb, int ldc,
                      int mr, int kc) {
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  for (int i0 = 0; i0 < mr; i0 += 8) {
    const int rows = mr - i0 < 8 ? mr - i0 : 8;
    __m512 acc[8];
    for (int i = 0; i < rows; ++i) acc[i] = _mm512_loadu_ps(c + (long)(i0 + i) * ldc);
    for (int k = 0; k < kc; k += 2) {
      const uint16_t* r = b + (long)k * ldb;
      __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)r));
      __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(r + ldb)));
      __m512bh bv = (__m512bh)_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      for (int i = 0; i < rows; ++i) {
        int32_t pair;
        memcpy(&pair, a + (long)(i0 + i) * lda + k, 4);
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(pair), bv);
      }
    }
    for (int i = 0; i < rows; ++i) _mm512_storeu_ps(c + (long)(i0 + i) * ldc, acc[i]);
  }
#else
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < 16; ++j)
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


def dot_intrin(kind: str, mr: int, kc: int):
    """C[mr, 16] (+)= A[mr, kc] @ B[kc, 16] accumulated in int32 (int8) or float32 (bfloat16)."""
    if kind not in KINDS:
        raise ScheduleError(f"dot_intrin: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    a_dtype, b_dtype, acc, step, update_fn, _ = KINDS[kind]
    if kc % step:
        raise ScheduleError(f"dot_intrin: {kind} needs kc a multiple of {step}, got {kc}")
    a = te.placeholder((mr, kc), a_dtype, name="a")
    b = te.placeholder((kc, NR), b_dtype, name="b")
    k = te.reduce_axis((0, kc), name="k")
    c = te.compute((mr, NR), lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k), name="c")  # fmt: skip
    binds = {
        t: tir.decl_buffer(t.shape, t.dtype, t.name.upper(), strides=[te.var(f"ld{t.name}"), 1])
        for t in (a, b, c)
    }
    reset_fn = "tf_dot_reset_i32" if acc == "int32" else "tf_dot_reset_f32"

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tir.call_extern("int32", reset_fn, cc.access_ptr("w"), cc.strides[0], mr)
        update = tir.call_extern(
            "int32", update_fn, cc.access_ptr("rw"), aa.access_ptr("r"), bb.access_ptr("r"),
            aa.strides[0], bb.strides[0], cc.strides[0], mr, kc,
        )  # fmt: skip
        return [reset, update], reset, update

    return te.decl_tensor_intrin(c.op, fintrin, name=f"{kind}_dot_{mr}x{NR}x{kc}", binds=binds)


def dot_gemm(m: int, n: int, k: int, kind: str):
    """C = A @ B with A (m, k), B (k, n) of the kind's input dtypes, accumulated in C's."""
    a_dtype, b_dtype, acc, *_ = KINDS[kind]
    A = te.placeholder((m, k), a_dtype, name="A")
    B = te.placeholder((k, n), b_dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r].astype(acc) * B[r, j].astype(acc), axis=r), name="C")  # fmt: skip
    return A, B, C


def schedule_dot_gemm(m: int, n: int, k: int, kind: str, mr: int = 8, kc: int = 256, parallel=True):
    """The GEMM tensorized with `dot_intrin`: mr x 16 tiles, k in blocks of kc (m, n, k must be
    multiples of mr, 16 and kc: the intrinsic needs whole tiles). Returns (schedule, [A, B, C])."""
    kc = min(kc, k)
    for name, size, tile in (("m", m, mr), ("n", n, NR), ("k", k, kc)):
        if size % tile:
            raise ScheduleError(f"schedule_dot_gemm: {name} = {size} is not a multiple of {tile}")
    A, B, C = dot_gemm(m, n, k, kind)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    (r,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, mr, NR)
    ko, ki = s[C].split(r, factor=kc)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, dot_intrin(kind, mr, kc))
    if parallel:
        s[C].parallel(io)
    return s, [A, B, C]
