"""Hopper (sm_90a) tensor-core intrinsics for `tensorize`: `wgmma.mma_async` on shared tiles in
the 128-byte swizzled layout, and the `cp.async` fill that writes that layout.

Two intrinsics share one shared-memory layout, "sw128": a tile of `rows x cols` 16-bit elements
(cols a multiple of 64) is stored as `[cols / 64][rows][64]`, each row of 64 elements 128 bytes,
and within each group of 8 rows (1024 bytes) the 16-byte chunk c of row r sits at chunk
`c ^ (r % 8)`: the hardware's 128B swizzle (so reads of 8 rows hit 32 distinct banks). A tile of
64 columns (A's k tile) is plain 128-byte rows, K-major; B's `k x n` tile is N-major in 64-wide
slabs. The shared tiles must start at 1024-byte boundaries (the CUDA codegen aligns shared
memory so when a kernel calls these).

    s[AS].tensorize(vec, swizzled_fill(block_m, 64, dtype))    # 8 columns of the A tile
    s[BS].tensorize(vec, swizzled_fill(64, block_n, dtype))    # ... of the B tile, N-major
    s[C].tensorize(ci, wgmma_sync(16, block_n, 64, dtype))              # per warp: 16 rows

or, instead of the per-thread cp.async fills, one bulk tensor copy (TMA) a tile issued by one
thread through a tensor map of the whole operand (the runtime encodes it at each call, the
kernel reads it from device memory), completing on the pipeline's mbarrier:

    s[AS].tensorize(rows, tma_fill(block_m, 64, dtype))

`wgmma` runs on a warpgroup (4 consecutive warps) computing 64 rows; in tensorize terms each
warp owns 16 of them (its "warp" accumulator is exactly the warp's part of the wgmma result, in
mma.m16n8's layout, so `mma_store` writes it out). Warps must be bound along m only, in order,
so warps 4g..4g+3 hold rows 64g..64g+63 of the block and the device function finds the
warpgroup's tile from the warp's (warp_m = 16, warp_n = the whole block_n).
"""

from __future__ import annotations

import functools

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.ops.tensor_core import SUPPORTED
from tensorforge.te.tensor_intrin import TensorIntrin

SWIZZLE_ALIGN = 1024  # bytes: a 128B-swizzle pattern repeats every 8 rows of 128 bytes


def _wgmma_asm(n: int, ptx_type: str) -> str:
    """`wgmma.mma_async.m64n{n}k16` (f32 accumulate, A K-major, B N-major: trans-b 1) as the
    n-specialization of tf_wg::wgmma_k16 on this thread's n / 2 accumulator floats."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    cpp = "half" if ptx_type == "f16" else "__nv_bfloat16"
    return (
        f"template <> __device__ __forceinline__ void wgmma_k16<{n}>(float* d, unsigned long long da,\n"
        f"                                                       unsigned long long db, const {cpp}*) {{\n"
        f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{count + 2}, 0;\\n"\n'
        f'               " wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx_type}.{ptx_type} "\n'
        f'               "{{{regs}}}, %{count}, %{count + 1}, p, 1, 1, 0, 1;\\n}}"\n'
        f"               : {outs}\n"
        f'               : "l"(da), "l"(db), "n"(1) : "memory");\n'
        f"}}\n"
    )


SW128_FILL_SOURCE = r"""
// tensorforge: one 16-byte cp.async into a shared tile of the 128B-swizzled layout "sw128":
// [COLS / SLAB][ROWS][SLAB] elements, SLAB = 128 bytes of them (64 halves, 32 floats), the
// 16-byte chunk c of row r at c ^ (r % 8) (ops/wgmma.py). `at` is where element `off`
// (= r * COLS + c, row-major) of the tile would be unswizzled (the tile's own offset:
// tensorize binds the intrinsic buffer's elem_offset to it).
template <int ROWS, int COLS, typename T>
__device__ __forceinline__ void tf_cp_async_sw128(T* at, const T* src, int off) {
  constexpr unsigned SLAB = 128 / sizeof(T), CHUNK = 16 / sizeof(T);
  static_assert((sizeof(T) == 2 || sizeof(T) == 4) && COLS % SLAB == 0, "sw128: 16- or 32-bit elements, 128-byte slabs");
  const unsigned r = static_cast<unsigned>(off) / COLS, c = static_cast<unsigned>(off) % COLS;
  const unsigned tile = static_cast<unsigned>(__cvta_generic_to_shared(at)) - unsigned(sizeof(T)) * off;
  const unsigned d = tile + (c / SLAB) * (ROWS * 128) + r * 128 + ((((c % SLAB) / CHUNK) ^ (r % 8)) * 16);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}
"""


def _wgmma_source(n: int) -> str:
    return (
        "\n// tensorforge: wgmma (sm_90a) on sw128 shared tiles (ops/wgmma.py)\n"
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        "namespace tf_wg {\n"
        "__device__ __forceinline__ unsigned long long desc(unsigned addr, unsigned lbo, unsigned sbo) {\n"
        "  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) |\n"
        "         (static_cast<unsigned long long>((lbo & 0x3FFFF) >> 4) << 16) |\n"
        "         (static_cast<unsigned long long>((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);\n"
        "}\n"
        "template <int N> __device__ void wgmma_k16(float*, unsigned long long, unsigned long long, const half*);\n"
        "template <int N> __device__ void wgmma_k16(float*, unsigned long long, unsigned long long, const __nv_bfloat16*);\n"
        + _wgmma_asm(n, "f16")
        + _wgmma_asm(n, "bf16")
        + "}  // namespace tf_wg\n"
        + WGMMA_SOURCE_TAIL
    )


WGMMA_SOURCE_TAIL = r"""
template <int WM, int WN>
__device__ __forceinline__ void tf_wgmma_fill_zero(float* acc) {
#pragma unroll
  for (int i = 0; i < WM * WN / 32; ++i) acc[i] = 0.f;
}
// acc (this warp's 16 x WN of its warpgroup's 64 x WN tile) += a[16, WK] @ b[WK, WN]: `a` is
// this warp's 16 rows of the warpgroup's K-major sw128 tile (WK = 64: 128-byte rows), `b` the
// N-major sw128 tile. The 4 warps of a warpgroup hold consecutive 16-row slices.
template <int WM, int WN, int WK, int PENDING, int FENCE = 1, typename T>
__device__ __forceinline__ void tf_wgmma_sync(float* acc, const T* a, const T* b) {
  static_assert(WM == 16 && WK == 64 && WN % 64 == 0, "wgmma: 16-row warp slices, k tiles of 64");
  const unsigned warp = ((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32) % 4;
  const unsigned a0 = static_cast<unsigned>(__cvta_generic_to_shared(a)) - warp * 16 * 128;
  const unsigned b0 = static_cast<unsigned>(__cvta_generic_to_shared(b));
  // tiles that came in through cp.async (the generic proxy; FENCE 1) need a proxy fence before
  // wgmma reads them through the async one; bulk tensor copies wrote them through that one
  if (FENCE) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < WK / 16; ++kk)  // A: 32 bytes a k16 step; B: 16 rows of 128 bytes
    tf_wg::wgmma_k16<WN>(acc, tf_wg::desc(a0 + kk * 32, 16, 1024),
                               tf_wg::desc(b0 + kk * 2048, WK * 128, 1024), a);
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  // PENDING 1: return with this step's group in flight, the last step's done (its tiles free)
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(PENDING) : "memory");
}
"""


@functools.cache
def swizzled_fill(rows: int, cols: int, dtype: str = "float16") -> TensorIntrin:
    """d[n] = s[n]: one 16-byte piece (8 halves, 4 floats) of a `rows x cols` shared tile stored
    in the sw128 layout, copied from global memory by cp.async (tensorize the innermost n
    columns of a fill whose threads cover the tile; inside a double_buffer(stages,
    sync="mbarrier") pipeline). float32 tiles are TF32 wgmma's (ops/wgmma_tf32.py)."""
    if dtype not in (*SUPPORTED, "float32"):
        raise ScheduleError(f"swizzled_fill: dtype must be one of {', '.join(SUPPORTED)}, float32")
    lanes = 4 if dtype == "float32" else 8  # 16 bytes
    if cols % (lanes * 8) or rows % 8:
        raise ScheduleError(
            f"swizzled_fill: a {rows} x {cols} {dtype} tile must have {lanes * 8}-column slabs "
            f"(128 bytes) and whole 8-row swizzle groups"
        )
    src = te.placeholder((lanes,), dtype, name="s")
    dst = te.compute((lanes,), lambda i: src[i], name="d")
    binds = {
        src: tir.decl_buffer(src.shape, dtype, "S"),
        dst: tir.decl_buffer(dst.shape, dtype, "D", scope="shared", elem_offset=te.var("off")),
    }

    def fintrin(ins, outs):
        (ss,) = ins
        (dd,) = outs
        return tir.call_extern(
            "handle", f"tf_cp_async_sw128<{rows}, {cols}>", dd.access_ptr("w"),
            ss.access_ptr("r"), dd.elem_offset,
        )  # fmt: skip

    return te.decl_tensor_intrin(
        dst.op, fintrin, name=f"sw128_fill_{dtype}_{rows}x{cols}", binds=binds,
        device_source=SW128_FILL_SOURCE,
    )  # fmt: skip


TMA_SOURCE = r"""
// tensorforge: a shared tile of the sw128 layout filled by bulk tensor copies (TMA, sm_90):
// COLS / 64 boxes of ROWS x 64 elements, each 128-byte row swizzled by the copy engine exactly
// as sw128 places it. `map` describes the whole operand as a 2-d [rows][ld] matrix (the CUDA
// codegen passes the kernel's tensor map of the buffer; the runtime encodes it), `off` is the
// tile's first element in it, `bar` the pipeline fill's "full" mbarrier. One thread copies.
// With CLUSTER > 1 the blocks of a cluster share the tile: each copies every CLUSTER-th box
// and multicasts it to all of them (the box leaves L2 once a cluster).
#ifndef TF_TENSOR_MAP
#define TF_TENSOR_MAP
struct __align__(64) tf_tensor_map { unsigned long long bits[16]; };
#endif
template <int ROWS, int COLS, int CLUSTER>
__device__ __forceinline__ void tf_tma_sw128(void* dst, const tf_tensor_map* map, long long off,
                                             long long ld, unsigned long long* bar) {
  static_assert(COLS % (64 * CLUSTER) == 0 && ROWS <= 256, "tma sw128: 64-column boxes of up to 256 rows, a share a block");
  if (threadIdx.x + threadIdx.y + threadIdx.z == 0) {
    const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(bar));
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    const int row = static_cast<int>(off / ld), col = static_cast<int>(off % ld);
    const unsigned long long m = reinterpret_cast<unsigned long long>(map);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(b), "r"(ROWS * COLS * 2) : "memory");  // all of it lands here
    unsigned rank = 0;
    if (CLUSTER > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
#pragma unroll
    for (int j = 0; j < COLS / 64; ++j) {
      if (CLUSTER == 1)
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(d + j * ROWS * 128), "l"(m), "r"(col + 64 * j), "r"(row), "r"(b) : "memory");
      else if (j % CLUSTER == static_cast<int>(rank))
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;"
                     :: "r"(d + j * ROWS * 128), "l"(m), "r"(col + 64 * j), "r"(row), "r"(b),
                        "h"(static_cast<unsigned short>((1u << CLUSTER) - 1)) : "memory");
    }
  }
  __syncwarp();  // warp 0 whole again before its next wgmma (.sync.aligned)
}
"""


FAST_GELU_SOURCE = r"""
#ifndef TF_FAST_GELU
#define TF_FAST_GELU
// GELU (erf): x * Phi(x) = x - x * h for x >= 0 and x * h below, h = erfc(|x| / sqrt 2) / 2 =
// 2^p(z) with p a degree-8 fit of log2(erfc(z) / 2) on [0, 4] (z clamped there; error of p
// under 6e-6, so h to 5e-6 relative): one ex2 and 8 FMAs where erff takes about twice that, and
// no 1 + erf cancellation for negative x; within 1e-4 relative of GELU, far under fp16's 5e-4
__device__ __forceinline__ float tf_fast_gelu(float x) {
  const float z = fminf(fabsf(x) * 0.70710678118654752f, 4.f);
  float p = -1.038724122e-06f;
  p = fmaf(p, z, -5.158052318e-06f);
  p = fmaf(p, z, 3.988057433e-04f);
  p = fmaf(p, z, -4.973767325e-03f);
  p = fmaf(p, z, 3.354588896e-02f);
  p = fmaf(p, z, -1.521928310e-01f);
  p = fmaf(p, z, -9.171079397e-01f);
  p = fmaf(p, z, -1.628087997e+00f);
  p = fmaf(p, z, -9.999958873e-01f);
  float h;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(h) : "f"(p));
  return x >= 0.f ? fmaf(-x, h, x) : x * h;
}
#endif
"""


TMA_STORE_SOURCE = (
    FAST_GELU_SOURCE
    + r"""
// tensorforge: a warp's accumulators (16 x WN of its warpgroup's wgmma tile) out through the
// fused epilogue (EPI 0 none, 1 bias, 2 bias then GELU (erf, below)), staged in shared memory as
// sw128 boxes of 16 rows x 64 (conflict-free 4-byte writes) and written by bulk tensor stores
// (one lane) through `map`, D's tensor map; `off` is the warp's first element of D. The
// pipeline's tiles are reused for the staging once every warpgroup's multiplies are done.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef TF_TENSOR_MAP
#define TF_TENSOR_MAP
struct __align__(64) tf_tensor_map { unsigned long long bits[16]; };
#endif
namespace tf_tms {
__device__ __forceinline__ unsigned pack(float x, float y, const half*) {
  const half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ unsigned pack(float x, float y, const __nv_bfloat16*) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const unsigned*>(&h);
}
__device__ __forceinline__ float to_float(half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
}  // namespace tf_tms
template <int WM, int WN, int EPI, typename OUT, typename BIAS>
__device__ __forceinline__ void tf_tma_store_epi(const float* acc, const tf_tensor_map* map,
                                                 const OUT* d, long long off, long long ld,
                                                 const BIAS* bias) {
  static_assert(WM == 16 && WN % 64 == 0, "tma store: a warp's 16 rows, 64-column boxes");
  extern __shared__ __align__(1024) unsigned char tf_stage_smem[];  // the kernel's dynamic shared
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid % 32;
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  __syncthreads();  // no warpgroup reads the pipeline's tiles any more
  const unsigned stage = static_cast<unsigned>(__cvta_generic_to_shared(tf_stage_smem)) + (tid / 32) * (WM * WN * 2);
#pragma unroll
  for (int ni = 0; ni < WN / 8; ++ni) {
    const float* c = acc + ni * 4;
    const int col = ni * 8 + (lane & 3) * 2;
    float v[4] = {c[0], c[1], c[2], c[3]};
    if (EPI >= 1) {
      const float b0 = tf_tms::to_float(bias[col]), b1 = tf_tms::to_float(bias[col + 1]);
      v[0] += b0; v[1] += b1; v[2] += b0; v[3] += b1;
    }
    if (EPI == 2) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = tf_fast_gelu(v[i]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned row = (lane >> 2) + 8 * h, chunk = (col % 64) / 8;
      const unsigned at = stage + (col / 64) * (WM * 128) + row * 128 + ((chunk ^ (row % 8)) * 16) + (col % 8) * 2;
      asm volatile("st.shared.b32 [%0], %1;" :: "r"(at), "r"(tf_tms::pack(v[2 * h], v[2 * h + 1], d)) : "memory");
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the copy engine reads them next
  __syncwarp();
  if (lane == 0) {
    const int row = static_cast<int>(off / ld), col = static_cast<int>(off % ld);
    const unsigned long long m = reinterpret_cast<unsigned long long>(map);
#pragma unroll
    for (int j = 0; j < WN / 64; ++j)
      asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                   :: "l"(m), "r"(col + 64 * j), "r"(row), "r"(stage + j * WM * 128) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  __syncwarp();
}
"""
)


@functools.cache
def tma_store(
    wm: int,
    wn: int,
    out_dtype: str = "float16",
    epilogue: str = "none",
    bias_dtype: str = "float16",
) -> TensorIntrin:
    """d[wm, wn] = epilogue(acc[wm, wn] (+ bias[j])): a warp's wgmma accumulator (wm = 16 of its
    warpgroup's rows) staged in shared memory and written by bulk tensor stores through D's
    tensor map (D: a row-major 16-bit kernel argument); it first waits for every warpgroup's
    multiplies, as mma_store(drain=True) waits for its own."""
    from tensorforge.ops.tensor_core import EPILOGUES, epilogue_expr

    if wm != 16 or wn % 64 or not 64 <= wn <= 256:
        raise ScheduleError(f"tma_store: a warp's 16 rows x 64 to 256 columns (64 a box), got {wm} x {wn}")  # fmt: skip
    if out_dtype not in SUPPORTED or epilogue not in EPILOGUES:
        raise ScheduleError(f"tma_store: 16-bit output ({', '.join(SUPPORTED)}), epilogue one of {', '.join(EPILOGUES)}")  # fmt: skip
    acc = te.placeholder((wm, wn), "float32", name="acc")
    bias = te.placeholder((wn,), bias_dtype, name="bias") if epilogue != "none" else None

    def value(i, j):
        out = epilogue_expr(acc[i, j], None if bias is None else bias[j], epilogue)
        return out.astype(out_dtype)

    d = te.compute((wm, wn), value, name="d")
    binds = {
        acc: tir.decl_buffer(acc.shape, "float32", "ACC", scope="warp"),
        d: tir.decl_buffer(
            d.shape, out_dtype, "D", strides=[te.var("ldd"), 1], elem_offset=te.var("doff")
        ),  # fmt: skip
    }
    code = {"none": 0, "bias": 1, "bias_gelu": 2}[epilogue]

    def fintrin(ins, outs):
        (dd,) = outs
        cc = ins[0]
        bias_ptr = ins[1].access_ptr("r") if bias is not None else dd.access_ptr("r")
        return tir.call_extern(
            "handle", f"tf_tma_store_epi<{wm}, {wn}, {code}>", cc.access_ptr("r"),
            dd.access_ptr("w"), dd.access_ptr("w"), dd.elem_offset, dd.strides[0], bias_ptr,
        )  # fmt: skip

    return te.decl_tensor_intrin(
        d.op, fintrin, name=f"tma_store_{epilogue}_{out_dtype}_{wm}x{wn}", binds=binds,
        device_source=TMA_STORE_SOURCE,
    )  # fmt: skip


@functools.cache
def tma_fill(rows: int, cols: int, dtype: str = "float16", cluster: int = 1) -> TensorIntrin:
    """d[rows, cols] = s[rows, cols]: a whole shared tile of the sw128 layout filled by bulk
    tensor copies (one thread, the copy engine swizzles), the fill of a
    double_buffer(stages, sync="mbarrier"...) pipeline; the operand must be a row-major kernel
    argument (the runtime encodes its tensor map). With `cluster` > 1 the blocks of a cluster
    of that many (pragma cluster_dims) share the tile, each multicasting a share of it."""
    if dtype not in SUPPORTED:
        raise ScheduleError(f"tma_fill: dtype must be one of {', '.join(SUPPORTED)}")
    if cols % 64 or rows % 8 or not 8 <= rows <= 256:
        raise ScheduleError(
            f"tma_fill: a {rows} x {cols} tile must have 64-column slabs and 8 to 256 rows "
            f"(whole 8-row swizzle groups)"
        )
    if cluster not in (1, 2, 4) or (cols // 64) % cluster:
        raise ScheduleError(
            f"tma_fill: a cluster of {cluster} (1, 2 or 4) must split the {cols // 64} "
            f"64-column slabs of the tile evenly"
        )
    src = te.placeholder((rows, cols), dtype, name="s")
    dst = te.compute((rows, cols), lambda i, j: src[i, j], name="d")
    binds = {
        src: tir.decl_buffer(
            src.shape, dtype, "S", strides=[te.var("lds"), 1], elem_offset=te.var("soff")
        ),
        dst: tir.decl_buffer(dst.shape, dtype, "D", scope="shared"),
    }

    def fintrin(ins, outs):
        (ss,) = ins
        (dd,) = outs
        return tir.call_extern(
            "handle", f"tf_tma_sw128<{rows}, {cols}, {cluster}>", dd.access_ptr("w"), ss.access_ptr("r"),
            ss.elem_offset, ss.strides[0],
        )  # fmt: skip

    return te.decl_tensor_intrin(
        dst.op, fintrin, name=f"tma_sw128_{dtype}_{rows}x{cols}_c{cluster}", binds=binds,
        device_source=TMA_SOURCE,
    )  # fmt: skip


@functools.cache
def wgmma_sync(
    wm: int, wn: int, wk: int, dtype: str = "float16", pending: int = 0, fence: bool = True
) -> TensorIntrin:
    """acc[wm, wn] (+)= a[wm, wk] @ b[wk, wn] by wgmma.mma_async.m64n{wn}k16 with a float32
    "warp" accumulator: wm = 16 (a warp's slice of its warpgroup's 64 rows), wk = 64; a and b
    are sw128 tiles in shared memory (swizzled_fill). With `pending` 1 a call returns with its
    multiplies still running (the previous call's done): the pipeline releases tiles a step
    late (double_buffer(sync="mbarrier_lag")) and the store drains (mma_store(drain=True)).
    `fence` False leaves out the proxy fence a step, for tiles the copy engine filled (tma_fill)."""
    if pending not in (0, 1):
        raise ScheduleError(f"wgmma_sync: pending must be 0 or 1, got {pending}")
    if dtype not in SUPPORTED:
        raise ScheduleError(f"wgmma_sync: dtype must be one of {', '.join(SUPPORTED)}")
    if wm != 16 or wk != 64 or wn % 64 or not 64 <= wn <= 256:
        raise ScheduleError(
            f"wgmma_sync: a warp's tile is 16 rows of its warpgroup's 64, k 64, n 64 to 256 in "
            f"steps of 64; got {wm} x {wn} x {wk}"
        )
    a = te.placeholder((wm, wk), dtype, name="a")
    b = te.placeholder((wk, wn), dtype, name="b")
    k = te.reduce_axis((0, wk), name="k")
    c = te.compute(
        (wm, wn),
        lambda i, j: te.sum(a[i, k].astype("float32") * b[k, j].astype("float32"), axis=k),
        name="c",
    )
    binds = {
        a: tir.decl_buffer(a.shape, dtype, "A", strides=[wk, 1], scope="shared"),
        b: tir.decl_buffer(b.shape, dtype, "B", strides=[wn, 1], scope="shared"),
        c: tir.decl_buffer(c.shape, "float32", "C", scope="warp"),
    }

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tir.call_extern("handle", f"tf_wgmma_fill_zero<{wm}, {wn}>", cc.access_ptr("w"))
        update = tir.call_extern(
            "handle", f"tf_wgmma_sync<{wm}, {wn}, {wk}, {pending}{'' if fence else ', 0'}>", cc.access_ptr("rw"),
            aa.access_ptr("r"), bb.access_ptr("r"),
        )  # fmt: skip
        return [reset, update], reset, update

    return te.decl_tensor_intrin(
        c.op, fintrin, name=f"wgmma_{dtype}_{wm}x{wn}x{wk}_p{pending}{'' if fence else '_nofence'}", binds=binds,
        device_source=_wgmma_source(wn),
    )  # fmt: skip
