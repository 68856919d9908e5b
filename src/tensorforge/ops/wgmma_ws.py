"""A warp-specialized Hopper (sm_90a) GEMM: D = epilogue(A @ B) of 16-bit operands, float32
accumulation, written as one CUDA C kernel (not through te/tensorize) to measure what the
scheduled wgmma kernels (ops/wgmma.py, graph/schedules_tensor_core.py) leave on the table.

A block is 1 producer warpgroup and 2 consumer warpgroups:
- the producer's elected thread fills a ring of STAGES shared-memory stages with bulk tensor
  copies (TMA, 128-byte swizzle: A's 64-column box of the tile's rows, B's 64 x 64 boxes,
  N-major), each stage's "full" mbarrier completing on the bytes, and waits on its "empty"
  mbarrier (one arrival a consumer warp) before refilling it;
- the consumers multiply a stage's tiles (4 wgmma k16 a stage for each 64 rows), keep one
  stage's multiplies in flight (wait_group 1) and release the stage before. Cooperative plans:
  both take each 128 x BN tile, 64 rows each. Ping-pong plans (`pingpong`, as CUTLASS's sm90
  "pingpong" kernel): each takes whole 64 * MW x BN tiles, the two in turn, so that one's
  epilogue runs while the other multiplies; a turn mbarrier each makes a warpgroup wait until
  the other has seen its last tile's stages full (without it, a warpgroup skipping the other's
  stages could wait on a stage's parity two phases early and pass at once).
- `setmaxnreg` moves registers from the producer (40) to the consumers (232).
The grid is persistent: each block walks units (tile, k part) blockIdx.x, + gridDim.x, ...,
the producer running ahead into the next unit while the consumers store the last one. With
`split` > 1 (cooperative only) k is cut in `split` parts: each part adds its float32 tile into
a workspace (`red.add`), and the part that arrives last (a per-tile counter) applies the
epilogue, stores D and leaves the workspace and counter zero again for the next call.

The epilogue (bias, GELU (erf, ops/wgmma.py's fitted FAST_GELU_SOURCE), residual) of `staged`
plans rounds each warpgroup's rows into shared memory past the ring, then copies them out in
16-byte pieces along rows, reading the residual so: the fragments' own stores (staged=False)
wrote 16 bytes of each of 8 rows an instruction and read the residual 2 bytes a load.

Rows past M and k past K come in as zeros (the copy engine's out-of-bounds fill); columns past
N are not stored. Needs K and N multiples of 8 (16-byte rows for the tensor maps), and D and
the residual 16-byte aligned (staged plans).

H200, GPU time a call (benchmarks/gpu_ws_gemm.py, one run, cuBLAS (+ torch's GELU or add) in
the same run; before: session 19's cooperative plan, erff GELU, fragment stores):
    2048 x 3072 x 768 + bias + GELU  22.9 us (cuBLAS 25.4, before 33.9) ping-pong 64 x 192
    2048 x 768 x 3072 + bias         16.6    (15.3, 20.9)                ping-pong 64 x 192
    2048 x 2304 x 768 + bias         15.6    (13.6, 26.8)                ping-pong 64 x 192
    2048 x 768 x 3072 + bias + res   18.6    (17.4)                      ping-pong 64 x 192
    1576 x 2304 x 768 + bias         13.2    (10.6, 18.7)                ping-pong 128 x 128
    1576 x 3072 x 768 + bias + GELU  21.5    (19.9, 27.9)                ping-pong 64 x 128
    1576 x 768 x 3072 + bias + res   18.1    (14.4)                      ping-pong 64 x 192
    1576 x 768 x 768 + bias + res     8.9    (7.3)                       ping-pong 64 x 192
    256 x 3072 x 768 + bias + GELU    6.4    (6.6, 11.8)                 ping-pong 64 x 128
    256 x 768 x 3072 + bias          12.4    (7.1, 19.5)  24 tiles: wants k split (ping-pong has none)
    1024^3                            5.9    (5.3, 9.1)                  ping-pong 64 x 128
    4096^3                          194.6    (179.9, 205.3)              cooperative 128 x 256
What each step gave (session 20's sweep): ping-pong alone 2048 x 2304 x 768 26.6 -> 21.4 us,
the staged epilogue 21.4 -> 15.4, the fitted GELU 2048 x 3072 x 768 28.1 -> 22.9 (the products
alone, nothing stored: 13.3); two stages of multiplies in flight (`inflight` 2) lost everywhere
(15.4 -> 16.4, 16.3 -> 17.5). Left: each SM multiplies at about 60% of cuBLAS's rate on 64-row
tiles (4 k steps of 64 x 192 in ~400 ns); k split for ping-pong; bulk tensor stores.
"""

from __future__ import annotations

import functools

from tensorforge.errors import ScheduleError
from tensorforge.ops.wgmma import FAST_GELU_SOURCE, _wgmma_source
from tensorforge.ops.wgmma_ws_plan import WsPlan


def _wgmma_scaled(n: int) -> str:
    """tf_ws::mma<N>: wgmma.mma_async.m64n{n}k16 (f32 += f16/bf16, B N-major) whose accumulator
    input is scaled by `keep` (0: overwrite, the first k step; no zeroing instructions, which
    would serialize the wgmma pipeline: ptxas C7515)."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    text = ""
    for cpp, ptx in (("half", "f16"), ("__nv_bfloat16", "bf16")):
        text += (
            f"template <> __device__ __forceinline__ void mma<{n}>(float* d, unsigned long long da,\n"
            f"    unsigned long long db, int keep, const {cpp}*) {{\n"
            f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{count + 2}, 0;\\n"\n'
            f'               " wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} "\n'
            f'               "{{{regs}}}, %{count}, %{count + 1}, p, 1, 1, 0, 1;\\n}}"\n'
            f"               : {outs}\n"
            f'               : "l"(da), "l"(db), "r"(keep) : "memory");\n'
            f"}}\n"
        )
    return (
        "namespace tf_ws {\n"
        "template <int N> __device__ void mma(float*, unsigned long long, unsigned long long, int, const half*);\n"
        "template <int N> __device__ void mma(float*, unsigned long long, unsigned long long, int, const __nv_bfloat16*);\n"
        + text
        + "}  // namespace tf_ws\n"
    )


# (discard: nothing stored, for benchmarks to time the products alone)
EPILOGUE_CODES = {
    "none": 0, "bias": 1, "gelu": 2, "bias_gelu": 3, "residual": 4, "bias_residual": 5,
    "gelu_residual": 6, "bias_gelu_residual": 7, "discard": 8,
}  # fmt: skip
CTYPES = {"float16": "half", "bfloat16": "__nv_bfloat16"}
ENTRY = "tf_ws_gemm"

WS_SOURCE = r"""
#ifndef TF_TENSOR_MAP
#define TF_TENSOR_MAP
struct __align__(64) tf_tensor_map { unsigned long long bits[16]; };
#endif
namespace tf_ws {
__device__ __forceinline__ unsigned saddr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void bar_init(unsigned b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_wait(unsigned b, unsigned parity) {
  asm volatile("{\n .reg .pred p;\n WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra WAIT;\n}" :: "r"(b), "r"(parity) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
}
__device__ __forceinline__ void bar_expect(unsigned b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_load(unsigned dst, const tf_tensor_map* map, int col, int row, unsigned b) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(col), "r"(row), "r"(b) : "memory");
}
__device__ __forceinline__ void put(half* d, float x, float y) { *reinterpret_cast<half2*>(d) = __floats2half2_rn(x, y); }
__device__ __forceinline__ void put(__nv_bfloat16* d, float x, float y) { *reinterpret_cast<__nv_bfloat162*>(d) = __floats2bfloat162_rn(x, y); }
__device__ __forceinline__ float get(half x) { return __half2float(x); }
__device__ __forceinline__ float get(__nv_bfloat16 x) { return __bfloat162float(x); }
// a barrier of one consumer warpgroup's 128 threads (named barriers 2 and 3: 1 is both's)
__device__ __forceinline__ void wg_sync(int wg) {
  if (wg == 0) asm volatile("bar.sync 2, 128;" ::: "memory");
  else asm volatile("bar.sync 3, 128;" ::: "memory");
}
// 8 values of T in 16 bytes, a + b (rounded once, as torch's add of two T tensors)
template <typename T> __device__ __forceinline__ uint4 add8(uint4 a, uint4 b);
template <> __device__ __forceinline__ uint4 add8<half>(uint4 a, uint4 b) {
  const half2* x = reinterpret_cast<const half2*>(&a); const half2* y = reinterpret_cast<const half2*>(&b);
  uint4 r; half2* z = reinterpret_cast<half2*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) { const float2 u = __half22float2(x[i]), v = __half22float2(y[i]); z[i] = __floats2half2_rn(u.x + v.x, u.y + v.y); }
  return r;
}
template <> __device__ __forceinline__ uint4 add8<__nv_bfloat16>(uint4 a, uint4 b) {
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a); const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&b);
  uint4 r; __nv_bfloat162* z = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) { const float2 u = __bfloat1622float2(x[i]), v = __bfloat1622float2(y[i]); z[i] = __floats2bfloat162_rn(u.x + v.x, u.y + v.y); }
  return r;
}
}  // namespace tf_ws

// units: tiles_m * tiles_n tiles (M fastest: consecutive blocks share B's columns), each cut
// in `split` parts of k; a part is [k0, k1) steps of 64
__device__ __forceinline__ void tf_ws_unit(int unit, int tiles_m, int split, int ksteps,
                                           int& tile_m, int& tile_n, int& tile, int& k0, int& k1) {
  tile = unit / split;
  const int part = unit % split;
  tile_m = tile % tiles_m;
  tile_n = tile / tiles_m;
  k0 = part * ksteps / split;
  k1 = (part + 1) * ksteps / split;
}

// EPI bits: 1 + bias[col], 2 GELU (erf) after it, 4 + res[row, col] after that. PP 1 ("ping-pong"):
// the consumer warpgroups take the block's units in turn, each a whole 64 * MW x BN tile, so
// one's epilogue runs while the other multiplies; PP 0: both share each 64 * CWG x BN tile.
template <typename T, int BN, int STAGES, int EPI, int CWG, int REGS, int PP = 0, int MW = 1, int ST = 0, int INFL = 1>
__device__ __forceinline__ void tf_ws_body(
    const tf_tensor_map* __restrict__ ma, const tf_tensor_map* __restrict__ mb,
    T* __restrict__ d, const T* __restrict__ bias, const T* __restrict__ res, float* __restrict__ work,
    unsigned* __restrict__ counts, int M, int N, int K, int tiles_m, int tiles_n, int split) {
  static_assert(PP || MW == 1, "cooperative tiles: one 64-row block a warpgroup");
  static_assert(!PP || CWG == 2, "ping-pong: two consumer warpgroups");
  constexpr int BM = PP ? 64 * MW : 64 * CWG;
  constexpr unsigned A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES;
  // ST: each consumer warpgroup's rows staged past the ring, rows of PITCH bytes (+16: the 8
  // rows a fragment store touches fall in distinct banks)
  constexpr int WG_ROWS = PP ? 64 * MW : 64, PITCH = BN * 2 + 16;
  extern __shared__ __align__(1024) unsigned char tf_ws_smem[];
  __shared__ __align__(8) unsigned long long bars[2 * STAGES + 2];
  __shared__ unsigned last_part;
  const unsigned base = (tf_ws::saddr(tf_ws_smem) + 1023u) & ~1023u;  // (sw128: 1024-aligned)
  const unsigned full0 = tf_ws::saddr(&bars[0]), empty0 = tf_ws::saddr(&bars[STAGES]);
  const unsigned order0 = tf_ws::saddr(&bars[2 * STAGES]);  // (ping-pong: a warpgroup's turn)
  const int wg = threadIdx.x / 128;
  const int ksteps = (K + 63) / 64;
  const int units = tiles_m * tiles_n * split;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      tf_ws::bar_init(full0 + 8 * s, 1);
      tf_ws::bar_init(empty0 + 8 * s, PP ? 4 : 4 * CWG);
    }
    tf_ws::bar_init(order0, 1);
    tf_ws::bar_init(order0 + 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == CWG) {  // the producer warpgroup: one thread issues every copy
    if (REGS) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x % 128 == 0) {
      int it = 0;
      for (int unit = blockIdx.x; unit < units; unit += gridDim.x) {
        int tile_m, tile_n, tile, k0, k1;
        tf_ws_unit(unit, tiles_m, split, ksteps, tile_m, tile_n, tile, k0, k1);
        for (int kt = k0; kt < k1; ++kt, ++it) {
          const int s = it % STAGES, n = it / STAGES;
          if (n > 0) tf_ws::bar_wait(empty0 + 8 * s, (n - 1) & 1);
          const unsigned full = full0 + 8 * s, at = base + s * STAGE;
          tf_ws::bar_expect(full, STAGE);
          tf_ws::tma_load(at, ma, kt * 64, tile_m * BM, full);
#pragma unroll
          for (int j = 0; j < BN / 64; ++j)
            tf_ws::tma_load(at + A_BYTES + j * 8192, mb, tile_n * BN + 64 * j, kt * 64, full);
        }
      }
    }
    return;
  }
  if (REGS) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int lane = threadIdx.x % 32, warp4 = (threadIdx.x / 32) % 4;
  float acc[MW][BN / 2];
  int it = 0, local = 0, turns = 0;
  for (int unit = blockIdx.x; unit < units; unit += gridDim.x, ++local) {
    int tile_m, tile_n, tile, k0, k1;
    tf_ws_unit(unit, tiles_m, split, ksteps, tile_m, tile_n, tile, k0, k1);
    if (PP) {
      if (local % 2 != wg) {  // the other warpgroup's tile: skip its stages
        it += k1 - k0;
        continue;
      }
      // wait until the other warpgroup has seen its last tile's stages full: a stage's phases
      // before this one's are then complete, so waiting on its parity cannot pass early
      if (local > 0) tf_ws::bar_wait(order0 + 8 * wg, turns & 1);
      if (local > 0) ++turns;
    }
    for (int kt = k0; kt < k1; ++kt, ++it) {
      const int s = it % STAGES;
      tf_ws::bar_wait(full0 + 8 * s, (it / STAGES) & 1);
      const unsigned a0 = base + s * STAGE + (PP ? 0 : wg * 64 * 128), b0 = base + s * STAGE + A_BYTES;
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int mw = 0; mw < MW; ++mw)
          tf_ws::mma<BN>(acc[mw], tf_wg::desc(a0 + mw * 8192 + kk * 32, 16, 1024),
                         tf_wg::desc(b0 + kk * 2048, 8192, 1024), kt > k0 || kk > 0,
                         static_cast<const T*>(nullptr));
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      // the step INFL before is done: its stage free
      asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(INFL) : "memory");
      if (kt >= k0 + INFL && lane == 0) tf_ws::bar_arrive(empty0 + 8 * ((it - INFL) % STAGES));
    }
    if (PP && threadIdx.x % 128 == 0) tf_ws::bar_arrive(order0 + 8 * (1 - wg));  // its turn
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int j = 1; j <= INFL; ++j)
      if (k1 - k0 >= j && lane == 0) tf_ws::bar_arrive(empty0 + 8 * ((it - j) % STAGES));
    if (EPI & 8) continue;  // (benchmarks: the products alone)
#pragma unroll
    for (int mw = 0; mw < MW; ++mw) {
      // the accumulators: row warp4 * 16 + lane / 4 (+ 8), columns n8 * 8 + lane % 4 * 2 (+ 1)
      const int row0 = tile_m * BM + (PP ? mw * 64 : wg * 64) + warp4 * 16 + lane / 4;
      const int col0 = tile_n * BN + (lane % 4) * 2;
      if (!PP && split > 1) {  // add this part into the workspace; the last part stores the tile
#pragma unroll
        for (int n8 = 0; n8 < BN / 8; ++n8)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + 8 * h, col = col0 + n8 * 8;
            if (row < M && col < N) {  // (red: no value back, no wait; atomicAdd of a float2
              // was a compare-and-swap loop, k1 split in 2 took 102 us against 21 unsplit)
              float* w = work + static_cast<long long>(row) * N + col;
              asm volatile("red.global.add.f32 [%0], %1;" :: "l"(w), "f"(acc[mw][n8 * 4 + 2 * h]) : "memory");
              asm volatile("red.global.add.f32 [%0], %1;" :: "l"(w + 1), "f"(acc[mw][n8 * 4 + 2 * h + 1]) : "memory");
            }
          }
        __threadfence();
        asm volatile("bar.sync 1, %0;" :: "n"(128 * CWG) : "memory");
        if (threadIdx.x == 0) last_part = atomicAdd(counts + tile, 1u) == static_cast<unsigned>(split - 1);
        asm volatile("bar.sync 1, %0;" :: "n"(128 * CWG) : "memory");
        if (!last_part) continue;
        __threadfence();
        if (threadIdx.x == 0) counts[tile] = 0u;
      }
      if constexpr (ST) {
        // the tile rounded to T in shared memory (bias and GELU applied), then copied out in
        // 16-byte pieces along rows (the residual read so too): the fragments' own stores
        // wrote 16 bytes of each of 8 rows an instruction, residual reads 2 bytes a load
        unsigned char* const out_tile = tf_ws_smem + (base - tf_ws::saddr(tf_ws_smem)) + STAGES * STAGE + wg * WG_ROWS * PITCH;
        if (mw == 0) tf_ws::wg_sync(wg);  // (its last copy has read the staged rows)
#pragma unroll
        for (int n8 = 0; n8 < BN / 8; ++n8) {
          const int col = col0 + n8 * 8;
          float b0 = 0.f, b1 = 0.f;
          if ((EPI & 1) && col < N) { b0 = tf_ws::get(bias[col]); b1 = tf_ws::get(bias[col + 1]); }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float x = acc[mw][n8 * 4 + 2 * h], y = acc[mw][n8 * 4 + 2 * h + 1];
            if (!PP && split > 1 && row0 + 8 * h < M && col < N) {  // the parts' sum; zero again
              float2* w = reinterpret_cast<float2*>(work + static_cast<long long>(row0 + 8 * h) * N + col);
              const float2 v = __ldcg(w);
              __stcg(w, make_float2(0.f, 0.f));
              x = v.x;
              y = v.y;
            }
            x += b0;
            y += b1;
            if (EPI & 2) { x = tf_fast_gelu(x); y = tf_fast_gelu(y); }
            const int lr = mw * 64 + warp4 * 16 + lane / 4 + 8 * h;
            tf_ws::put(reinterpret_cast<T*>(out_tile + lr * PITCH) + n8 * 8 + (lane % 4) * 2, x, y);
          }
        }
        if (mw == MW - 1) {
          tf_ws::wg_sync(wg);
          const int first_row = tile_m * BM + (PP ? 0 : wg * 64);
          constexpr int PIECES = WG_ROWS * BN / 8;  // 16-byte pieces of this warpgroup's rows
#pragma unroll 4
          for (int i = threadIdx.x % 128; i < PIECES; i += 128) {
            const int r = i / (BN / 8), c = i % (BN / 8);
            const int row = first_row + r, col = tile_n * BN + c * 8;
            if (row >= M || col >= N) continue;
            uint4 v = *reinterpret_cast<const uint4*>(out_tile + r * PITCH + c * 16);
            const long long at = static_cast<long long>(row) * N + col;
            if (EPI & 4) v = tf_ws::add8<T>(v, __ldg(reinterpret_cast<const uint4*>(res + at)));
            *reinterpret_cast<uint4*>(d + at) = v;
          }
        }
      } else {
#pragma unroll
        for (int n8 = 0; n8 < BN / 8; ++n8) {
          const int col = col0 + n8 * 8;
          if (col >= N) continue;
          float b0 = 0.f, b1 = 0.f;
          if (EPI & 1) { b0 = tf_ws::get(bias[col]); b1 = tf_ws::get(bias[col + 1]); }
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int row = row0 + 8 * h;
            if (row >= M) continue;
            float x = acc[mw][n8 * 4 + 2 * h], y = acc[mw][n8 * 4 + 2 * h + 1];
            if (!PP && split > 1) {  // the sum of the parts, and the workspace zero again
              float2* w = reinterpret_cast<float2*>(work + static_cast<long long>(row) * N + col);
              const float2 v = __ldcg(w);
              __stcg(w, make_float2(0.f, 0.f));
              x = v.x;
              y = v.y;
            }
            x += b0;
            y += b1;
            if (EPI & 2) { x = tf_fast_gelu(x); y = tf_fast_gelu(y); }
            const long long at = static_cast<long long>(row) * N + col;
            if (EPI & 4) { x += tf_ws::get(res[at]); y += tf_ws::get(res[at + 1]); }
            tf_ws::put(d + at, x, y);
          }
        }
      }
    }
  }
}
"""


@functools.cache
def ws_device_source(bn: int) -> str:
    """The device code (tf_ws_body and what it calls) for blocks of `bn` columns."""
    return _wgmma_source(bn) + _wgmma_scaled(bn) + FAST_GELU_SOURCE + WS_SOURCE


@functools.cache
def ws_gemm_source(plan: WsPlan, epilogue: str = "none", dtype: str = "float16") -> str:
    """The CUDA C of the kernel for `plan` (extern "C" ENTRY, sizes as arguments)."""
    if epilogue not in EPILOGUE_CODES:
        raise ScheduleError(f"ws_gemm: epilogue one of {', '.join(EPILOGUE_CODES)}, got {epilogue!r}")  # fmt: skip
    if plan.bn % 64 or not 64 <= plan.bn <= 256 or plan.cwg not in (1, 2):
        raise ScheduleError(f"ws_gemm: 64 to 256 columns in steps of 64, 1 or 2 consumer warpgroups: {plan}")  # fmt: skip
    if plan.pingpong and (plan.cwg != 2 or plan.split != 1 or plan.mw * plan.bn > 256):
        raise ScheduleError(f"ws_gemm: ping-pong takes 2 consumer warpgroups, k whole, 64 * mw x bn tiles of at most 64 x 256 values a thread's quarter: {plan}")  # fmt: skip
    ctype = CTYPES[dtype]
    code = EPILOGUE_CODES[epilogue]
    return (
        ws_device_source(plan.bn)
        + f'extern "C" __global__ void __launch_bounds__({plan.threads}, 1) {ENTRY}(\n'
        f"    const tf_tensor_map* __restrict__ ma, const tf_tensor_map* __restrict__ mb,\n"
        f"    {ctype}* __restrict__ d, const {ctype}* __restrict__ bias, const {ctype}* __restrict__ res,\n"
        f"    float* __restrict__ work, unsigned* __restrict__ counts, int M, int N, int K, int tiles_m,\n"
        f"    int tiles_n, int split) {{\n"
        f"  tf_ws_body<{plan.template_args(ctype, code)}>(\n"
        f"      ma, mb, d, bias, res, work, counts, M, N, K, tiles_m, tiles_n, split);\n"
        f"}}\n"
    )


_functions: dict = {}


def _function(plan: WsPlan, epilogue: str, dtype: str):
    from tensorforge.runtime import cuda_driver
    from tensorforge.runtime.cuda_exec import compile_cuda

    key = (plan, epilogue, dtype)
    if key not in _functions:
        cuda_driver.activate()
        module = cuda_driver.driver().module_from_buffer(compile_cuda(ws_gemm_source(plan, epilogue, dtype), "sm_90a"))  # fmt: skip
        fn = module.get_function(ENTRY)
        fn.set_attribute(cuda_driver.driver().function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, plan.shared_bytes())  # fmt: skip
        _functions[key] = (module, fn)
    return _functions[key][1]


def launch(
    plan: WsPlan, epilogue: str, dtype: str, a: int, b: int, d: int, bias: int, work: int,
    counts: int, m: int, n: int, k: int, sm_count: int, residual: int = 0,
) -> None:  # fmt: skip
    """D[m, n] = epilogue(A[m, k] @ B[k, n] (+ bias, GELU, + residual)) on the default stream:
    a, b, d, bias, residual ([m, n]), work (float32 [m, n], zero; split plans only) and counts
    (uint32 a tile, zero; split plans only) are device addresses, every matrix row-major and
    contiguous."""
    import numpy as np

    from tensorforge.codegen.base import TensorMap
    from tensorforge.runtime import cuda_driver
    from tensorforge.runtime.cuda_tensor_map import device_map

    if k % 8 or n % 8 or k <= 0:
        raise ScheduleError(f"ws_gemm: k ({k}) and n ({n}) must be positive multiples of 8 (16-byte rows)")  # fmt: skip
    if plan.staged and (d % 16 or (epilogue.endswith("residual") and residual % 16)):
        raise ScheduleError("ws_gemm: staged plans store D and read the residual 16 bytes at a time: both 16-byte aligned")  # fmt: skip
    cuda_driver.activate()  # (torch's primary context: the tensor maps are allocated in it)
    ma = device_map(TensorMap("a", dtype, m, k, plan.bm), a)
    mb = device_map(TensorMap("b", dtype, k, n, 64), b)
    tm, tn = plan.tiles(m, n)
    grid = min(plan.units(m, n), sm_count)
    i32 = np.int32
    _function(plan, epilogue, dtype)(
        np.uintp(ma), np.uintp(mb), np.uintp(d), np.uintp(bias), np.uintp(residual), np.uintp(work), np.uintp(counts),
        i32(m), i32(n), i32(k), i32(tm), i32(tn), i32(plan.split),
        block=(plan.threads, 1, 1), grid=(grid, 1, 1), shared=plan.shared_bytes(),
    )  # fmt: skip
