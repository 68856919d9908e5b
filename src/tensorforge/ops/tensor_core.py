"""Tensor-core intrinsics for `tensorize` on CUDA (sm_80+): `mma.sync.m16n8k16` on float16 or
bfloat16 and `mma.sync.m16n8k8` on float32 tiles rounded to TF32, both with float32
accumulation, `ldmatrix` fragment loads, and fragment stores with fused epilogues.

A warp computes a `wm x wn` tile of C. Its accumulator is a "warp"-scope stage (each lane keeps
wm * wn / 32 floats in registers, in mma's layout); the A and B tiles come from shared memory.

    s[C].set_scope("warp")                            # C: the float32 reduction
    s[C].tensorize(ci, mma_sync(wm, wn, bk, dtype))   # C[wm, wn] += A[wm, bk] @ B[bk, wn]
    s[D].tensorize(di, mma_store(wm, wn, ...))        # D[wm, wn] = epilogue(C[wm, wn])

Every lane of the warp runs the same call (the stages around them bind no threadIdx.x, so all
32 lanes do); the device functions below split the work by lane id. The warp's tile must be
one warp's: bind the warp index to threadIdx.y (or z) with threadIdx.x of extent 32.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.te.tensor_intrin import TensorIntrin


@dataclass(frozen=True)
class Operand:
    """How a dtype's shared tiles feed mma.sync: an element's bytes, the k depth of one mma, and
    the elements that pad a shared row of A and of B (so the fragment loads hit distinct banks;
    see the device functions)."""

    dtype: str
    bytes: int
    k_step: int
    pad_a: int
    pad_b: int


# float32 operands are multiplied in TF32 (10-bit mantissas, rounded to nearest by cvt.rna);
# A's rows pad by 16 bytes for ldmatrix, B's by 8 floats for its per-element loads
OPERANDS = {
    "float16": Operand("float16", 2, 16, 8, 8),
    "bfloat16": Operand("bfloat16", 2, 16, 8, 8),
    "float32": Operand("float32", 4, 8, 4, 8),
}
SUPPORTED = ("float16", "bfloat16")  # the 16-bit operands (bulk copies, wgmma, gemm_fp16)
EPILOGUES = ("none", "bias", "bias_gelu")

DEVICE_SOURCE = r"""
// tensorforge tensor-core intrinsics: mma.sync.m16n8k16 (f16/bf16 -> f32) with ldmatrix loads
#include <cuda_fp16.h>
#include <cuda_bf16.h>
namespace tf_tc {
__device__ __forceinline__ unsigned lane_id() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
__device__ __forceinline__ unsigned smem(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem(p)));
}
__device__ __forceinline__ void mma_16816(float* d, const unsigned (&a)[4], unsigned b0,
                                          unsigned b1, const half*) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_16816(float* d, const unsigned (&a)[4], unsigned b0,
                                          unsigned b1, const __nv_bfloat16*) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void store2(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ void store2(half* p, float x, float y) {
  *reinterpret_cast<half2*>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float gelu(float x) {
  return x * 0.5f * (1.f + erff(x * 0.70710678118654752f));
}
}  // namespace tf_tc

// acc: this lane's (WM/16) x (WN/8) tiles of 4 floats, in mma.m16n8's accumulator layout
template <int WM, int WN>
__device__ __forceinline__ void tf_mma_fill_zero(float* acc) {
#pragma unroll
  for (int i = 0; i < WM * WN / 32; ++i) acc[i] = 0.f;
}

// acc[WM, WN] += a[WM, WK] @ b[WK, WN]; a and b are row-major tiles in shared memory. The
// fragments are double-buffered in registers: the ldmatrix loads of k step kk + 1 are issued
// before the mma of step kk, so their latency hides behind the math (fully unrolled).
template <int WM, int WN, int WK, typename T>
__device__ __forceinline__ void tf_mma_sync(float* acc, const T* a, int lda, const T* b, int ldb) {
  static_assert(WM % 16 == 0 && WN % 16 == 0 && WK % 16 == 0, "tile must be 16-aligned");
  constexpr int MI = WM / 16, NJ = WN / 16, KK = WK / 16;
  const int lane = static_cast<int>(tf_tc::lane_id());
  const int q = lane >> 3, r = lane & 7;
  const T* pa = a + (r + (q & 1) * 8) * lda + (q >> 1) * 8;
  const T* pb = b + (r + (q & 1) * 8) * ldb + (q >> 1) * 8;
  unsigned af[2][MI][4];
  unsigned bf[2][NJ][4];  // [nj][0..1]: columns nj * 16 + 0..7, [2..3]: + 8..15
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) tf_tc::ldmatrix_x4(af[0][mi], pa + mi * 16 * lda);
#pragma unroll
  for (int nj = 0; nj < NJ; ++nj) tf_tc::ldmatrix_x4_trans(bf[0][nj], pb + nj * 16);
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {
    const int cur = kk & 1, nxt = cur ^ 1;
    if (kk + 1 < KK) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        tf_tc::ldmatrix_x4(af[nxt][mi], pa + mi * 16 * lda + (kk + 1) * 16);
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj)
        tf_tc::ldmatrix_x4_trans(bf[nxt][nj], pb + (kk + 1) * 16 * ldb + nj * 16);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int n = 0; n < 2 * NJ; ++n) {
        const int ni = (mi & 1) ? 2 * NJ - 1 - n : n;  // serpentine: reuse b across mi
        tf_tc::mma_16816(acc + (mi * (2 * NJ) + ni) * 4, af[cur][mi], bf[cur][ni >> 1][(ni & 1) * 2],
                         bf[cur][ni >> 1][(ni & 1) * 2 + 1], a);
      }
  }
}

// TF32: acc[WM, WN] += a[WM, WK] @ b[WK, WN] on float32 tiles in shared memory, each operand
// rounded to TF32 (cvt.rna) as it is loaded, with mma.m16n8k8 (k steps of 8). Lane = 4 g + t.
// A: ldmatrix.x4 reads four 8 x 16-byte matrices, one 32-bit word a lane from each: on floats,
// matrix q (rows r + (q & 1) * 8, floats (q >> 1) * 4 .. + 3) gives lane g * 4 + t the element
// (g + (q & 1) * 8, t + (q >> 1) * 4): exactly the fragment's a[q]. Its 8 row addresses are
// conflict free when the row stride is an odd number of 16-byte chunks (lda = WK' + 4 with WK'
// a multiple of 8: 48, 80 or 144 bytes). B: b0 = b[t][g], b1 = b[t + 4][g] by plain loads
// (ldmatrix.trans moves 16-bit elements only): lane g * 4 + t reads bank (t * ldb + g) % 32,
// all 32 distinct when ldb % 32 == 8 (rows of a multiple of 32 floats, padded by 8).
__device__ __forceinline__ unsigned tf32_of(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma_1688_tf32(float* d, const unsigned (&a)[4], unsigned b0,
                                              unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <int MI, int NI>
__device__ __forceinline__ void tf32_fragments(unsigned (&af)[MI][4], unsigned (&bf)[NI][2],
                                               const float* pa, int lda, const float* pb,
                                               int ldb) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    tf_tc::ldmatrix_x4(af[mi], pa + mi * 16 * lda);
#pragma unroll
    for (int i = 0; i < 4; ++i) af[mi][i] = tf32_of(__uint_as_float(af[mi][i]));
  }
#pragma unroll
  for (int ni = 0; ni < NI; ++ni) {
    bf[ni][0] = tf32_of(pb[ni * 8]);
    bf[ni][1] = tf32_of(pb[4 * ldb + ni * 8]);
  }
}
template <int WM, int WN, int WK>
__device__ __forceinline__ void tf_mma_sync_tf32(float* acc, const float* a, int lda,
                                                 const float* b, int ldb) {
  static_assert(WM % 16 == 0 && WN % 16 == 0 && WK % 8 == 0, "tile must be 16 x 16 x 8-aligned");
  constexpr int MI = WM / 16, NI = WN / 8, KK = WK / 8;
  const int lane = static_cast<int>(tf_tc::lane_id());
  const int q = lane >> 3, r = lane & 7;
  const float* pa = a + (r + (q & 1) * 8) * lda + (q >> 1) * 4;
  const float* pb = b + (lane & 3) * ldb + (lane >> 2);
  unsigned af[2][MI][4];
  unsigned bf[2][NI][2];
  tf32_fragments<MI, NI>(af[0], bf[0], pa, lda, pb, ldb);
#pragma unroll
  for (int kk = 0; kk < KK; ++kk) {  // the loads of step kk + 1 in flight behind its mma
    const int cur = kk & 1;
    if (kk + 1 < KK)
      tf32_fragments<MI, NI>(af[cur ^ 1], bf[cur ^ 1], pa + (kk + 1) * 8, lda,
                             pb + (kk + 1) * 8 * ldb, ldb);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int n = 0; n < NI; ++n) {
        const int ni = (mi & 1) ? NI - 1 - n : n;  // serpentine: reuse b across mi
        mma_1688_tf32(acc + (mi * NI + ni) * 4, af[cur][mi], bf[cur][ni][0], bf[cur][ni][1]);
      }
  }
}

// d[WM, WN] = epilogue(acc (+ bias[col])); EPI: 0 none, 1 bias, 2 bias then GELU (erf)
template <int WM, int WN, int EPI, typename OUT, typename BIAS>
__device__ __forceinline__ void tf_mma_store_epi(OUT* d, int ldd, const float* acc,
                                                 const BIAS* bias) {
  const int lane = static_cast<int>(tf_tc::lane_id());
#pragma unroll
  for (int mi = 0; mi < WM / 16; ++mi)
#pragma unroll
    for (int ni = 0; ni < WN / 8; ++ni) {
      const float* c = acc + (mi * (WN / 8) + ni) * 4;
      const int row = mi * 16 + (lane >> 2), col = ni * 8 + (lane & 3) * 2;
      float v[4] = {c[0], c[1], c[2], c[3]};
      if (EPI >= 1) {
        const float b0 = tf_tc::to_float(bias[col]), b1 = tf_tc::to_float(bias[col + 1]);
        v[0] += b0; v[1] += b1; v[2] += b0; v[3] += b1;
      }
      if (EPI == 2) {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = tf_tc::gelu(v[i]);
      }
      tf_tc::store2(d + row * ldd + col, v[0], v[1]);
      tf_tc::store2(d + (row + 8) * ldd + col, v[2], v[3]);
    }
}

// before storing accumulators that wgmma (ops/wgmma.py) may still be writing: wait for them
__device__ __forceinline__ void tf_wgmma_wait_all() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}

template <int WM, int WN, typename OUT>
__device__ __forceinline__ void tf_mma_store(OUT* d, int ldd, const float* acc) {
  tf_mma_store_epi<WM, WN, 0, OUT, float>(d, ldd, acc, nullptr);
}
"""


def _check_tile(wm: int, wn: int, what: str) -> None:
    if wm % 16 or wn % 16 or wm <= 0 or wn <= 0:
        raise ScheduleError(f"{what}: the warp tile {wm} x {wn} must be a multiple of 16 x 16")


def gelu(x: te.Expr) -> te.Expr:
    """GELU with erf (torch.nn.functional.gelu's default), as the store intrinsic computes it."""
    return x * 0.5 * (1.0 + te.erf(x * 0.7071067811865476))


def epilogue_expr(acc: te.Expr, bias: te.Expr | None, epilogue: str) -> te.Expr:
    """What a fused epilogue computes from a float32 accumulator (and bias[col])."""
    if epilogue not in EPILOGUES:
        raise ScheduleError(f"epilogue must be one of {', '.join(EPILOGUES)}, got {epilogue!r}")
    if epilogue == "none":
        return acc
    x = acc + bias.astype("float32")
    return gelu(x) if epilogue == "bias_gelu" else x


@functools.cache
def mma_sync(wm: int, wn: int, wk: int, dtype: str = "float16") -> TensorIntrin:
    """acc[wm, wn] (+)= a[wm, wk] @ b[wk, wn] with a float32 "warp" accumulator; a and b are
    row-major tiles (of any row stride) in shared memory, padded as OPERANDS says. float32
    tiles are multiplied in TF32 (each operand rounded to a 10-bit mantissa)."""
    if dtype not in OPERANDS:
        raise ScheduleError(f"mma_sync: dtype must be one of {', '.join(OPERANDS)}, got {dtype}")
    _check_tile(wm, wn, "mma_sync")
    step = OPERANDS[dtype].k_step
    if wk % step:
        raise ScheduleError(f"mma_sync: the k depth {wk} of {dtype} must be a multiple of {step}")
    function = "tf_mma_sync_tf32" if dtype == "float32" else "tf_mma_sync"
    a = te.placeholder((wm, wk), dtype, name="a")
    b = te.placeholder((wk, wn), dtype, name="b")
    k = te.reduce_axis((0, wk), name="k")
    c = te.compute(
        (wm, wn),
        lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k),
        name="c",
    )
    binds = {
        a: tir.decl_buffer(a.shape, dtype, "A", strides=[te.var("lda"), 1], scope="shared"),
        b: tir.decl_buffer(b.shape, dtype, "B", strides=[te.var("ldb"), 1], scope="shared"),
        c: tir.decl_buffer(c.shape, "float32", "C", scope="warp"),
    }

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tir.call_extern("handle", f"tf_mma_fill_zero<{wm}, {wn}>", cc.access_ptr("w"))
        update = tir.call_extern(
            "handle",
            f"{function}<{wm}, {wn}, {wk}>",
            cc.access_ptr("rw"),
            aa.access_ptr("r"),
            aa.strides[0],
            bb.access_ptr("r"),
            bb.strides[0],
        )
        return [reset, update], reset, update

    return te.decl_tensor_intrin(
        c.op, fintrin, name=f"mma_sync_{dtype}_{wm}x{wn}x{wk}", binds=binds,
        device_source=DEVICE_SOURCE,
    )  # fmt: skip


BULK_SOURCE = r"""
// tensorforge: a tile of shared memory filled by bulk copies (cp.async.bulk, sm_90), one row
// each, completing on the pipeline's "full" mbarrier `bar` (the CUDA codegen passes the one of
// the fill it is in). With CLUSTER > 1 each block of the cluster copies ROWS / CLUSTER of the
// rows and multicasts them to every block of the cluster: a row leaves L2 once per cluster.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
template <int ROWS, int COLS, int CLUSTER, typename T>
__device__ __forceinline__ void tf_bulk_rows(T* dst, int ldd, const T* src, int lds,
                                             unsigned long long* bar) {
  static_assert((COLS * sizeof(T)) % 16 == 0 && ROWS % CLUSTER == 0, "rows of 16-byte multiples");
  constexpr unsigned ROW_BYTES = COLS * sizeof(T);
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
  if (tid == 0)  // this block's tile: all ROWS rows land here (its own and its peers')
    asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}"
                 :: "r"(b), "r"(ROWS * ROW_BYTES) : "memory");
  unsigned rank = 0;
  if (CLUSTER > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  // the rows spread over the warps (a few lanes of each): a warp issues its copies one by one
  const unsigned warps = (nthreads + 31) / 32, per = (ROWS / CLUSTER + warps - 1) / warps;
  const unsigned lane = tid % 32, r = (tid / 32) * per + lane;
  if (lane < per && r < ROWS / CLUSTER) {
    const unsigned row = rank * (ROWS / CLUSTER) + r;
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + row * ldd));
    const T* g = src + static_cast<long long>(row) * lds;
    if (CLUSTER > 1)
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                   " [%0], [%1], %2, [%3], %4;"
                   :: "r"(d), "l"(g), "r"(ROW_BYTES), "r"(b), "h"((unsigned short)((1u << CLUSTER) - 1))
                   : "memory");
    else
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(d), "l"(g), "r"(ROW_BYTES), "r"(b) : "memory");
  }
}
"""


@functools.cache
def bulk_rows(rows: int, cols: int, dtype: str = "float16", cluster: int = 1) -> TensorIntrin:
    """d[rows, cols] = s[rows, cols]: a shared tile filled from global memory by bulk copies of
    whole rows (sm_90), inside a pipeline of double_buffer(sync="mbarrier") fills; with
    `cluster` > 1 the blocks of a cluster of that many share the tile (same source rows), each
    reading rows / cluster of them from L2 and multicasting them to all."""
    if dtype not in SUPPORTED:
        raise ScheduleError(f"bulk_rows: dtype must be one of {', '.join(SUPPORTED)}, got {dtype}")
    if (cols * 2) % 16 or rows % cluster or cluster not in (1, 2, 4):
        raise ScheduleError(
            f"bulk_rows: rows of {cols} halves must be a multiple of 16 bytes and {rows} rows "
            f"split over the cluster of {cluster} (1, 2 or 4)"
        )
    src = te.placeholder((rows, cols), dtype, name="s")
    dst = te.compute((rows, cols), lambda i, j: src[i, j], name="d")
    binds = {
        src: tir.decl_buffer(src.shape, dtype, "S", strides=[te.var("lds"), 1]),
        dst: tir.decl_buffer(dst.shape, dtype, "D", strides=[te.var("ldd"), 1], scope="shared"),
    }

    def fintrin(ins, outs):
        (ss,) = ins
        (dd,) = outs
        return tir.call_extern(
            "handle", f"tf_bulk_rows<{rows}, {cols}, {cluster}>", dd.access_ptr("w"),
            dd.strides[0], ss.access_ptr("r"), ss.strides[0],
        )  # fmt: skip

    return te.decl_tensor_intrin(
        dst.op, fintrin, name=f"bulk_rows_{dtype}_{rows}x{cols}_c{cluster}", binds=binds,
        device_source=BULK_SOURCE,
    )  # fmt: skip


@functools.cache
def mma_store(
    wm: int,
    wn: int,
    out_dtype: str = "float16",
    epilogue: str = "none",
    bias_dtype: str = "float16",
    drain: bool = False,
) -> TensorIntrin:
    """d[wm, wn] = epilogue(acc[wm, wn] (+ bias[j])) from a warp accumulator to memory (global
    or shared, any row stride; rows of even length so pairs of columns store together). With
    `drain`, first wait for the warpgroup's wgmma still in flight (wgmma_sync with pending=1)."""
    _check_tile(wm, wn, "mma_store")
    acc = te.placeholder((wm, wn), "float32", name="acc")
    bias = te.placeholder((wn,), bias_dtype, name="bias") if epilogue != "none" else None

    def value(i, j):
        return epilogue_expr(acc[i, j], None if bias is None else bias[j], epilogue).astype(
            out_dtype
        )

    d = te.compute((wm, wn), value, name="d")
    binds = {
        acc: tir.decl_buffer(acc.shape, "float32", "ACC", scope="warp"),
        d: tir.decl_buffer(d.shape, out_dtype, "D", strides=[te.var("ldd"), 1]),
    }
    code = {"none": 0, "bias": 1, "bias_gelu": 2}[epilogue]

    def fintrin(ins, outs):
        (dd,) = outs
        if bias is None:
            (cc,) = ins
            store = tir.call_extern(
                "handle", f"tf_mma_store<{wm}, {wn}>", dd.access_ptr("w"), dd.strides[0],
                cc.access_ptr("r"),
            )  # fmt: skip
        else:
            cc, bb = ins
            store = tir.call_extern(
                "handle", f"tf_mma_store_epi<{wm}, {wn}, {code}>", dd.access_ptr("w"),
                dd.strides[0], cc.access_ptr("r"), bb.access_ptr("r"),
            )  # fmt: skip
        if not drain:
            return store
        return [tir.call_extern("handle", "tf_wgmma_wait_all"), store]

    return te.decl_tensor_intrin(
        d.op, fintrin,
        name=f"mma_store_{epilogue}_{out_dtype}_{wm}x{wn}{'_drain' if drain else ''}", binds=binds,
        device_source=DEVICE_SOURCE,
    )  # fmt: skip
