"""The C source of ops.cpu_dot's micro-kernels (compiled per Target by cpu_dot_kernels): C[mr, nr]
(+)= A[mr, kc] @ B on B's VNNI panels, by AMX tiles, AVX-512 dot instructions, widened
multiply-adds / FMAs on zmm or ymm, or plain C, whichever the target's features select; and
the panel packing (`tf_pack_*`)."""

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__) || defined(__AMX_TILE__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define TF_AMX 1
#endif
#define TF_CAT2(a, b) a##b
#define TF_CAT(a, b) TF_CAT2(a, b)
#define TF_FN(name) TF_CAT(name, TF_TAG)

int TF_FN(tf_dot_reset_i32)(int32_t* c, int ldc, int mr, int nr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, nr * sizeof(int32_t));
  return 0;
}

int TF_FN(tf_dot_reset_f32)(float* c, int ldc, int mr, int nr) {
  for (int i = 0; i < mr; ++i) memset(c + (long)i * ldc, 0, nr * sizeof(float));
  return 0;
}

#if defined(TF_AMX)
/* the OS must grant the AMX tile state to this process once (Linux >= 5.16) */
static int tf_amx_ready(void) {
  static int ready = -1;
  if (ready < 0) ready = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                                 18 /* XFEATURE_XTILEDATA */) == 0;
  return ready;
}

/* 8 tiles of 16 rows x 64 bytes: 0-3 the 2 x 2 C tiles, 4-5 A, 6-7 B */
static void tf_amx_configure(void) {
  struct { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  _tile_loadconfig(&cfg);
}

/* C[mr, nr] += A @ B in 32 x 32 blocks of 2 x 2 tiles (16 rows / 16 columns at the edges);
   KB k per A tile (64 int8 / 32 bf16), B tiles of 16 k-groups from the panel (row = 64 B). */
#define TF_AMX_GEMM(NAME, CT, AT, BT, STEP, DP)                                                 \
  static void NAME(CT* c, const AT* a, const BT* b, int lda, int ldc, int mr, int nr, int kc,  \
                   int init) {                                                                 \
    const int kb = 16 * STEP; /* k per tile */                                                  \
    tf_amx_configure();                                                                        \
    for (int i0 = 0; i0 < mr; i0 += 32)                                                        \
      for (int j0 = 0; j0 < nr; j0 += 32) {                                                    \
        const int two_rows = mr - i0 >= 32, two_cols = nr - j0 >= 32;                          \
        CT* ct = c + (long)i0 * ldc + j0;                                                      \
        const long cs = (long)ldc * sizeof(CT);                                                \
        if (init) {                                                                            \
          _tile_zero(0);                                                                       \
          _tile_zero(1);                                                                       \
          _tile_zero(2);                                                                       \
          _tile_zero(3);                                                                       \
        } else {                                                                               \
          _tile_loadd(0, ct, cs);                                                              \
          if (two_cols) _tile_loadd(1, ct + 16, cs);                                           \
          if (two_rows) _tile_loadd(2, ct + 16L * ldc, cs);                                    \
          if (two_rows && two_cols) _tile_loadd(3, ct + 16L * ldc + 16, cs);                   \
        }                                                                                      \
        for (int k0 = 0; k0 < kc; k0 += kb) {                                                  \
          const AT* at = a + (long)i0 * lda + k0;                                              \
          const BT* bt = b + (long)(k0 / STEP) * nr * STEP + j0 * STEP;                        \
          _tile_loadd(4, at, (long)lda * sizeof(AT));                                          \
          _tile_loadd(6, bt, (long)nr * STEP * sizeof(BT));                                    \
          DP(0, 4, 6);                                                                         \
          if (two_cols) {                                                                      \
            _tile_loadd(7, bt + 16 * STEP, (long)nr * STEP * sizeof(BT));                      \
            DP(1, 4, 7);                                                                       \
          }                                                                                    \
          if (two_rows) {                                                                      \
            _tile_loadd(5, at + 16L * lda, (long)lda * sizeof(AT));                            \
            DP(2, 5, 6);                                                                       \
            if (two_cols) DP(3, 5, 7);                                                         \
          }                                                                                    \
        }                                                                                      \
        _tile_stored(0, ct, cs);                                                               \
        if (two_cols) _tile_stored(1, ct + 16, cs);                                            \
        if (two_rows) _tile_stored(2, ct + 16L * ldc, cs);                                     \
        if (two_rows && two_cols) _tile_stored(3, ct + 16L * ldc + 16, cs);                    \
      }                                                                                        \
    _tile_release();                                                                           \
  }
#endif

/* The AVX-512 register tile: C[ROWS, 16 * VECS] += A[ROWS, kc] @ B[kc, 16 * VECS]; per k-group
   VECS vectors of the panel and ROWS broadcasts of A feed ROWS * VECS dot instructions. Called
   with constant ROWS / VECS, so the accumulators stay in registers. */
#define TF_TILE(NAME, CT, AT, BT, VT, STEP, ZERO, LOAD, STORE, DOT)                             \
  static inline __attribute__((always_inline)) void NAME(                                      \
      CT* c, const AT* a, const BT* b, int lda, int ldc, int nr, int kc, int init,              \
      const int ROWS, const int VECS) {                                                        \
    VT acc[16][4];                                                                             \
    for (int i = 0; i < ROWS; ++i)                                                             \
      for (int v = 0; v < VECS; ++v)                                                           \
        acc[i][v] = init ? ZERO : LOAD(c + (long)i * ldc + 16 * v);                            \
    for (int q = 0; q < kc / STEP; ++q) {                                                      \
      const BT* row = b + (long)q * nr * STEP;                                                 \
      __m512i bv[4];                                                                           \
      for (int v = 0; v < VECS; ++v) bv[v] = _mm512_loadu_si512(row + 16 * STEP * v);         \
      for (int i = 0; i < ROWS; ++i) {                                                         \
        int32_t group;                                                                         \
        memcpy(&group, a + (long)i * lda + STEP * q, 4);                                       \
        const __m512i av = _mm512_set1_epi32(group);                                           \
        for (int v = 0; v < VECS; ++v) acc[i][v] = DOT(acc[i][v], av, bv[v]);                  \
      }                                                                                        \
    }                                                                                          \
    for (int i = 0; i < ROWS; ++i)                                                             \
      for (int v = 0; v < VECS; ++v) STORE(c + (long)i * ldc + 16 * v, acc[i][v]);             \
  }

#define TF_CASE_ROWS(TILE, V, ...)                                        \
  switch (rows) {                                                         \
    case 1: TILE(__VA_ARGS__, 1, V); break;                               \
    case 2: TILE(__VA_ARGS__, 2, V); break;                               \
    case 3: TILE(__VA_ARGS__, 3, V); break;                               \
    case 4: TILE(__VA_ARGS__, 4, V); break;                               \
    case 5: TILE(__VA_ARGS__, 5, V); break;                               \
    case 6: TILE(__VA_ARGS__, 6, V); break;                               \
    case 7: if (V < 4) TILE(__VA_ARGS__, 7, V); break;                    \
    case 8: if (V < 4) TILE(__VA_ARGS__, 8, V); break;                    \
    default: break;                                                       \
  }
/* C[mr, nr] += A @ B: 64-column (then 48, 32, 16) strips, rows in register tiles; a strip's
   kc x 64 slice of the panel is reused by every row tile. Tails of 9-16 rows in two tiles. */
#define TF_AVX512_GEMM(NAME, TILE, CT, AT, BT)                                                  \
  static void NAME(CT* c, const AT* a, const BT* b, int lda, int ldc, int mr, int nr, int kc,  \
                   int init) {                                                                 \
    for (int j0 = 0; j0 < nr;) {                                                               \
      const int vecs = (nr - j0) / 16 >= 4 ? 4 : (nr - j0) / 16;                               \
      const int most = vecs == 4 ? 6 : 8;                                                      \
      for (int i0 = 0; i0 < mr; i0 += most) {                                                  \
        const int rows = mr - i0 < most ? mr - i0 : most;                                      \
        CT* ct = c + (long)i0 * ldc + j0;                                                      \
        const AT* at = a + (long)i0 * lda;                                                     \
        const BT* bt = b + (long)j0 * (sizeof(int32_t) / sizeof(BT));                          \
        if (vecs == 4) { TF_CASE_ROWS(TILE, 4, ct, at, bt, lda, ldc, nr, kc, init) }           \
        else if (vecs == 3) { TF_CASE_ROWS(TILE, 3, ct, at, bt, lda, ldc, nr, kc, init) }      \
        else if (vecs == 2) { TF_CASE_ROWS(TILE, 2, ct, at, bt, lda, ldc, nr, kc, init) }      \
        else { TF_CASE_ROWS(TILE, 1, ct, at, bt, lda, ldc, nr, kc, init) }                     \
      }                                                                                        \
      j0 += 16 * vecs;                                                                         \
    }                                                                                          \
  }

/* TILE(args..., rows) with `rows` (1 .. MOST) a constant in each call, so a tile's accumulators
   stay in registers; MOST is 4, 6, 8 or 12 */
#define TF_UNDER_4(T, ...) \
  case 1: T(__VA_ARGS__, 1); break; case 2: T(__VA_ARGS__, 2); break; case 3: T(__VA_ARGS__, 3); break;
#define TF_UNDER_6(T, ...) \
  TF_UNDER_4(T, __VA_ARGS__) case 4: T(__VA_ARGS__, 4); break; case 5: T(__VA_ARGS__, 5); break;
#define TF_UNDER_8(T, ...) \
  TF_UNDER_6(T, __VA_ARGS__) case 6: T(__VA_ARGS__, 6); break; case 7: T(__VA_ARGS__, 7); break;
#define TF_UNDER_12(T, ...)                                                              \
  TF_UNDER_8(T, __VA_ARGS__) case 8: T(__VA_ARGS__, 8); break; case 9: T(__VA_ARGS__, 9); break; \
  case 10: T(__VA_ARGS__, 10); break; case 11: T(__VA_ARGS__, 11); break;
#define TF_ROWS(MOST, T, ...) \
  switch (rows) { TF_UNDER_##MOST(T, __VA_ARGS__) default: T(__VA_ARGS__, MOST); break; }
/* C[mr, nr] (+)= A @ B in strips of COLS columns (a strip's kc x COLS slice of the panel serves
   every row tile) and row tiles of up to MOST rows */
#define TF_STRIP_GEMM(NAME, TILE, CT, AT, BT, STEP, COLS, MOST)                                 \
  static void NAME(CT* c, const AT* a, const BT* b, int lda, int ldc, int mr, int nr, int kc,  \
                   int init) {                                                                 \
    for (int j0 = 0; j0 < nr; j0 += COLS)                                                      \
      for (int i0 = 0; i0 < mr; i0 += MOST) {                                                  \
        CT* ct = c + (long)i0 * ldc + j0;                                                      \
        const AT* at = a + (long)i0 * lda;                                                     \
        const BT* bt = b + (long)j0 * STEP;                                                    \
        const int rows = mr - i0 < MOST ? mr - i0 : MOST;                                      \
        TF_ROWS(MOST, TILE, ct, at, bt, lda, ldc, nr, kc, init)                                \
      }                                                                                        \
  }

/* ---- int8: uint8 A x int8 B -> int32, step 4 ---- */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define TF_LOAD_I32(p) _mm512_loadu_si512(p)
#define TF_STORE_I32(p, v) _mm512_storeu_si512(p, v)
TF_TILE(tf_vnni_tile, int32_t, uint8_t, int8_t, __m512i, 4, _mm512_setzero_si512(), TF_LOAD_I32, TF_STORE_I32, _mm512_dpbusd_epi32)
TF_AVX512_GEMM(tf_vnni_gemm, tf_vnni_tile, int32_t, uint8_t, int8_t)
#endif
#if defined(TF_AMX) && defined(__AMX_INT8__)
TF_AMX_GEMM(tf_amx_int8_gemm, int32_t, uint8_t, int8_t, 4, _tile_dpbusd)
#endif

#if defined(__AVX512BW__) && !defined(__AVX512VNNI__)
#define TF_AVX512BW_INT8 1
/* AVX-512 without vpdpbusd: the AVX2 tile's widening on zmm, C[ROWS, 16] per strip: a k-quad of
   16 columns (64 bytes) in two zmm of int16 (8 columns each), vpmaddwd; a column's two lanes
   paired by vpermt2d at the end. 12 rows: 24 + 2 + 1 of 32 zmm. */
static inline __attribute__((always_inline)) void tf_avx512bw_int8_tile(
    int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldc, int nr, int kc, int init,
    const int ROWS) {
  static const int32_t even_lanes[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  __m512i lo[12], hi[12];
  for (int i = 0; i < ROWS; ++i) lo[i] = hi[i] = _mm512_setzero_si512();
  for (int q = 0; q < kc / 4; ++q) {
    const int8_t* row = b + (long)q * nr * 4;
    const __m512i b0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)row));
    const __m512i b1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(row + 32)));
    for (int i = 0; i < ROWS; ++i) {
      int32_t group;
      memcpy(&group, a + (long)i * lda + 4 * q, 4);
      const __m512i av = _mm512_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(group)));
      lo[i] = _mm512_add_epi32(lo[i], _mm512_madd_epi16(b0, av));
      hi[i] = _mm512_add_epi32(hi[i], _mm512_madd_epi16(b1, av));
    }
  }
  const __m512i even = _mm512_loadu_si512(even_lanes);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int i = 0; i < ROWS; ++i) {
    __m512i sums = _mm512_add_epi32(_mm512_permutex2var_epi32(lo[i], even, hi[i]),
                                    _mm512_permutex2var_epi32(lo[i], odd, hi[i]));
    int32_t* ci = c + (long)i * ldc;
    if (!init) sums = _mm512_add_epi32(sums, _mm512_loadu_si512(ci));
    _mm512_storeu_si512(ci, sums);
  }
}

TF_STRIP_GEMM(tf_avx512bw_int8_gemm, tf_avx512bw_int8_tile, int32_t, uint8_t, int8_t, 4, 16, 12)
#endif

#if defined(__AVX2__) && !(defined(__AVX512VNNI__) && defined(__AVX512BW__))
#define TF_AVX2_INT8 1
/* AVX2 (no vpdpbusd): C[ROWS, 8] (+)= A @ B. A k-quad of 8 columns (32 bytes of the panel) is
   widened to int16 in two ymm (4 columns each), A's quad widened and broadcast, and vpmaddwd
   sums two exact products per int32 lane (|u8 x s8| < 2^15; vpmaddubsw would saturate); a
   column's two lanes are added once at the end (vphaddd). 6 rows: 12 + 2 + 1 of 16 ymm. */
static inline __attribute__((always_inline)) void tf_avx2_int8_tile(
    int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldc, int nr, int kc, int init,
    const int ROWS) {
  __m256i lo[6], hi[6];
  for (int i = 0; i < ROWS; ++i) lo[i] = hi[i] = _mm256_setzero_si256();
  for (int q = 0; q < kc / 4; ++q) {
    const int8_t* row = b + (long)q * nr * 4;
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)row));
    const __m256i b1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(row + 16)));
    for (int i = 0; i < ROWS; ++i) {
      int32_t group;
      memcpy(&group, a + (long)i * lda + 4 * q, 4);
      const __m256i av = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(group)));
      lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(b0, av));
      hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(b1, av));
    }
  }
  for (int i = 0; i < ROWS; ++i) { /* hadd: c0 c1 c4 c5 | c2 c3 c6 c7 -> c0 .. c7 */
    __m256i sums = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo[i], hi[i]), 0xD8);
    int32_t* ci = c + (long)i * ldc;
    if (!init) sums = _mm256_add_epi32(sums, _mm256_loadu_si256((const __m256i*)ci));
    _mm256_storeu_si256((__m256i*)ci, sums);
  }
}

TF_STRIP_GEMM(tf_avx2_int8_gemm, tf_avx2_int8_tile, int32_t, uint8_t, int8_t, 4, 8, 6)
#endif

/* C[mr, nr] += A[mr, kc] (uint8, row stride lda) @ B (int8, packed [kc / 4][nr][4]);
   kc % 4 == 0, nr % 16 == 0; amx: use AMX tiles where the host grants them; init: C = A @ B
   (C's old values are not read) */
int TF_FN(tf_dot_int8)(int32_t* c, const uint8_t* a, const int8_t* b, int lda, int ldc, int mr,
                       int nr, int kc, int amx, int init) {
#if defined(TF_AMX) && defined(__AMX_INT8__)
  if (amx && mr % 16 == 0 && kc % 64 == 0 && tf_amx_ready()) {
    tf_amx_int8_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
    return 0;
  }
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  tf_vnni_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#elif defined(TF_AVX512BW_INT8)
  tf_avx512bw_int8_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#elif defined(TF_AVX2_INT8)
  tf_avx2_int8_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#else
  if (init) TF_FN(tf_dot_reset_i32)(c, ldc, mr, nr);
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < nr; ++j)
        c[(long)i * ldc + j] += (int32_t)a[(long)i * lda + k] * (int32_t)b[(long)(k / 4) * nr * 4 + j * 4 + k % 4];
#endif
  (void)amx;
  return 0;
}

/* ---- bfloat16 (as uint16 bits) -> float32, step 2 ---- */
static float tf_bf16_to_f32(uint16_t x) {
  uint32_t bits = (uint32_t)x << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define TF_DOT_BF16(acc, a, b) _mm512_dpbf16_ps(acc, (__m512bh)(a), (__m512bh)(b))
TF_TILE(tf_bf16_tile, float, uint16_t, uint16_t, __m512, 2, _mm512_setzero_ps(), _mm512_loadu_ps, _mm512_storeu_ps, TF_DOT_BF16)
TF_AVX512_GEMM(tf_bf16_gemm, tf_bf16_tile, float, uint16_t, uint16_t)
#endif
#if defined(TF_AMX) && defined(__AMX_BF16__)
TF_AMX_GEMM(tf_amx_bf16_gemm, float, uint16_t, uint16_t, 2, _tile_dpbf16ps)
#endif

#if defined(__AVX512F__) && !(defined(__AVX512BF16__) && defined(__AVX512BW__))
#define TF_AVX512_BF16 1
/* AVX-512 without vdpbf16ps: the AVX2 tile on zmm, C[ROWS, 16 * VECS]: a k-pair of 16 columns
   (64 bytes) as two float vectors (even k shifted up, odd k masked). 8 rows x 2: 16 + 4 + 2. */
static inline __attribute__((always_inline)) void tf_avx512_bf16_tile(
    float* c, const uint16_t* a, const uint16_t* b, int lda, int ldc, int nr, int kc, int init,
    const int ROWS, const int VECS) {
  const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
  __m512 acc[8][2];
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < VECS; ++v)
      acc[i][v] = init ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (long)i * ldc + 16 * v);
  for (int q = 0; q < kc / 2; ++q) {
    const uint16_t* row = b + (long)q * nr * 2;
    __m512 even[2], odd[2];
    for (int v = 0; v < VECS; ++v) {
      const __m512i pairs = _mm512_loadu_si512(row + 32 * v);
      even[v] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
      odd[v] = _mm512_castsi512_ps(_mm512_and_si512(pairs, high));
    }
    for (int i = 0; i < ROWS; ++i) {
      int32_t pair;
      memcpy(&pair, a + (long)i * lda + 2 * q, 4);
      const __m512i ap = _mm512_set1_epi32(pair);
      const __m512 a0 = _mm512_castsi512_ps(_mm512_slli_epi32(ap, 16));
      const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(ap, high));
      for (int v = 0; v < VECS; ++v) {
        acc[i][v] = _mm512_fmadd_ps(a0, even[v], acc[i][v]);
        acc[i][v] = _mm512_fmadd_ps(a1, odd[v], acc[i][v]);
      }
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < VECS; ++v) _mm512_storeu_ps(c + (long)i * ldc + 16 * v, acc[i][v]);
}

#define TF_BF16_TILE_1(...) tf_avx512_bf16_tile(__VA_ARGS__, 1)
#define TF_BF16_TILE_2(...) tf_avx512_bf16_tile(__VA_ARGS__, 2)
static void tf_avx512_bf16_gemm(float* c, const uint16_t* a, const uint16_t* b, int lda,
                                int ldc, int mr, int nr, int kc, int init) {
  for (int j0 = 0; j0 < nr;) {
    const int vecs = nr - j0 >= 32 ? 2 : 1;
    for (int i0 = 0; i0 < mr; i0 += 8) {
      float* ct = c + (long)i0 * ldc + j0;
      const uint16_t* at = a + (long)i0 * lda;
      const uint16_t* bt = b + (long)j0 * 2;
      const int rows = mr - i0 < 8 ? mr - i0 : 8;
      if (vecs == 2) { TF_ROWS(8, TF_BF16_TILE_2, ct, at, bt, lda, ldc, nr, kc, init) }
      else { TF_ROWS(8, TF_BF16_TILE_1, ct, at, bt, lda, ldc, nr, kc, init) }
    }
    j0 += 16 * vecs;
  }
}
#endif

#if defined(__AVX2__) && defined(__FMA__) && !(defined(__AVX512BF16__) && defined(__AVX512BW__))
#define TF_AVX2_BF16 1
/* AVX2 (no vdpbf16ps): C[ROWS, 16] (+)= A @ B. A k-pair of 8 columns (32 bytes of the panel)
   is two float vectors, its even k shifted up 16 bits, its odd k masked; A's pair likewise,
   broadcast; two FMAs per row and vector. 4 rows: 8 + 4 + 2 of 16 ymm. */
static inline __attribute__((always_inline)) void tf_avx2_bf16_tile(
    float* c, const uint16_t* a, const uint16_t* b, int lda, int ldc, int nr, int kc, int init,
    const int ROWS) {
  const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
  __m256 acc[4][2];
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < 2; ++v)
      acc[i][v] = init ? _mm256_setzero_ps() : _mm256_loadu_ps(c + (long)i * ldc + 8 * v);
  for (int q = 0; q < kc / 2; ++q) {
    const uint16_t* row = b + (long)q * nr * 2;
    __m256 even[2], odd[2];
    for (int v = 0; v < 2; ++v) {
      const __m256i pairs = _mm256_loadu_si256((const __m256i*)(row + 16 * v));
      even[v] = _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
      odd[v] = _mm256_castsi256_ps(_mm256_and_si256(pairs, high));
    }
    for (int i = 0; i < ROWS; ++i) {
      int32_t pair;
      memcpy(&pair, a + (long)i * lda + 2 * q, 4);
      const __m256i ap = _mm256_set1_epi32(pair);
      const __m256 a0 = _mm256_castsi256_ps(_mm256_slli_epi32(ap, 16));
      const __m256 a1 = _mm256_castsi256_ps(_mm256_and_si256(ap, high));
      for (int v = 0; v < 2; ++v) {
        acc[i][v] = _mm256_fmadd_ps(a0, even[v], acc[i][v]);
        acc[i][v] = _mm256_fmadd_ps(a1, odd[v], acc[i][v]);
      }
    }
  }
  for (int i = 0; i < ROWS; ++i)
    for (int v = 0; v < 2; ++v) _mm256_storeu_ps(c + (long)i * ldc + 8 * v, acc[i][v]);
}

TF_STRIP_GEMM(tf_avx2_bf16_gemm, tf_avx2_bf16_tile, float, uint16_t, uint16_t, 2, 16, 4)
#endif

/* C[mr, nr] += A[mr, kc] @ B (packed [kc / 2][nr][2]) on bfloat16 bits, float32;
   kc % 2 == 0, nr % 16 == 0 */
int TF_FN(tf_dot_bf16)(float* c, const uint16_t* a, const uint16_t* b, int lda, int ldc, int mr,
                       int nr, int kc, int amx, int init) {
#if defined(TF_AMX) && defined(__AMX_BF16__)
  if (amx && mr % 16 == 0 && kc % 32 == 0 && tf_amx_ready()) {
    tf_amx_bf16_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
    return 0;
  }
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
  tf_bf16_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#elif defined(TF_AVX512_BF16)
  tf_avx512_bf16_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#elif defined(TF_AVX2_BF16)
  tf_avx2_bf16_gemm(c, a, b, lda, ldc, mr, nr, kc, init);
#else
  if (init) TF_FN(tf_dot_reset_f32)(c, ldc, mr, nr);
  for (int i = 0; i < mr; ++i)
    for (int k = 0; k < kc; ++k)
      for (int j = 0; j < nr; ++j)
        c[(long)i * ldc + j] += tf_bf16_to_f32(a[(long)i * lda + k]) *
                                tf_bf16_to_f32(b[(long)(k / 2) * nr * 2 + j * 2 + k % 2]);
#endif
  (void)amx;
  return 0;
}

/* ---- packing: out[q][x][t] = b[q * STEP + t][x] for q < groups, x < nr (nr % 16 == 0) ---- */
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
int TF_FN(tf_pack_int8)(int8_t* out, const int8_t* b, int ldb, int groups, int nr) {
  for (int q = 0; q < groups; ++q) {
    const int8_t* r = b + (long)q * 4 * ldb;
    int8_t* o = out + (long)q * nr * 4;
#if defined(__SSE2__)
    for (int x = 0; x < nr; x += 16) { /* 4 rows of 16 bytes -> 16 quads */
      const __m128i r0 = _mm_loadu_si128((const __m128i*)(r + x));
      const __m128i r1 = _mm_loadu_si128((const __m128i*)(r + ldb + x));
      const __m128i r2 = _mm_loadu_si128((const __m128i*)(r + 2L * ldb + x));
      const __m128i r3 = _mm_loadu_si128((const __m128i*)(r + 3L * ldb + x));
      const __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
      const __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
      _mm_storeu_si128((__m128i*)(o + 4 * x), _mm_unpacklo_epi16(lo01, lo23));
      _mm_storeu_si128((__m128i*)(o + 4 * x + 16), _mm_unpackhi_epi16(lo01, lo23));
      _mm_storeu_si128((__m128i*)(o + 4 * x + 32), _mm_unpacklo_epi16(hi01, hi23));
      _mm_storeu_si128((__m128i*)(o + 4 * x + 48), _mm_unpackhi_epi16(hi01, hi23));
    }
#else
    for (int x = 0; x < nr; ++x)
      for (int t = 0; t < 4; ++t) o[4 * x + t] = r[(long)t * ldb + x];
#endif
  }
  return 0;
}

int TF_FN(tf_pack_bf16)(uint16_t* out, const uint16_t* b, int ldb, int groups, int nr) {
  for (int q = 0; q < groups; ++q) {
    const uint16_t* r = b + (long)q * 2 * ldb;
    uint16_t* o = out + (long)q * nr * 2;
#if defined(__SSE2__)
    for (int x = 0; x < nr; x += 8) { /* 2 rows of 8 values -> 8 pairs */
      const __m128i r0 = _mm_loadu_si128((const __m128i*)(r + x));
      const __m128i r1 = _mm_loadu_si128((const __m128i*)(r + ldb + x));
      _mm_storeu_si128((__m128i*)(o + 2 * x), _mm_unpacklo_epi16(r0, r1));
      _mm_storeu_si128((__m128i*)(o + 2 * x + 8), _mm_unpackhi_epi16(r0, r1));
    }
#else
    for (int x = 0; x < nr; ++x)
      for (int t = 0; t < 2; ++t) o[2 * x + t] = r[(long)t * ldb + x];
#endif
  }
  return 0;
}

/* 1 where this library's AMX path for `kind` (0 int8, 1 bf16) would run here */
int TF_FN(tf_dot_uses_amx)(int kind) {
#if defined(TF_AMX)
#if defined(__AMX_INT8__)
  if (kind == 0) return tf_amx_ready();
#endif
#if defined(__AMX_BF16__)
  if (kind == 1) return tf_amx_ready();
#endif
#endif
  (void)kind;
  return 0;
}
"""
