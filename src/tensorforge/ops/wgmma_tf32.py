"""Hopper (sm_90a) TF32 tensor-core intrinsics for `tensorize`: `wgmma.mma_async ... k8 .tf32`
on float32 shared tiles in the 128-byte swizzled layout (filled by ops/wgmma.py's swizzled_fill).

TF32's wgmma reads both operands K-major from shared memory (the PTX ISA allows no transpose
for it): A as `[m][k]`, B as `[n][k]`, each row's k step 32 floats = one 128-byte swizzled row
("sw128_tf32": chunk c of row r at `c ^ (r % 8)`, 16-byte chunks of 4 floats, the hardware's
128B swizzle, as ops/wgmma.py's sw128 for 16-bit elements). A k8 step is 32 bytes of each row:
4 of them a k step, each a descriptor 32 bytes further along the rows (the swizzle is applied
by the hardware on the address bits, so the start moves as in the unswizzled row), 8-row groups
1024 bytes apart.

    s[AS].tensorize(vec, swizzled_fill(block_m, 32, "float32"))  # 4 floats of A's tile [m][k]
    s[BS].tensorize(vec, swizzled_fill(block_n, 32, "float32"))  # ... of B's tile [n][k]
    s[C].tensorize(ci, wgmma_tf32_sync(16, block_n, 32))    # per warp: 16 rows x block_n

The tensor cores use a float's top 19 bits (TF32); the rest are dropped, not rounded: callers
round what they can beforehand (constant weights at compile time: `round_to_tf32`).
"""

from __future__ import annotations

import functools

from tensorforge import te, tir
from tensorforge.errors import ScheduleError
from tensorforge.te.tensor_intrin import TensorIntrin

K_STEP = 32  # floats of a k step: one 128-byte swizzled row


def _wgmma_asm(n: int) -> str:
    """`wgmma.mma_async.m64n{n}k8.f32.tf32.tf32` (A and B K-major: no transpose operands) as
    the n-specialization of tf_wg32::wgmma_k8 on this thread's n / 2 accumulator floats."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    return (
        f"template <> __device__ __forceinline__ void wgmma_k8<{n}>(float* d, unsigned long long da,\n"
        f"                                                      unsigned long long db) {{\n"
        f'  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{count + 2}, 0;\\n"\n'
        f'               " wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 "\n'
        f'               "{{{regs}}}, %{count}, %{count + 1}, p, 1, 1;\\n}}"\n'
        f"               : {outs}\n"
        f'               : "l"(da), "l"(db), "n"(1) : "memory");\n'
        f"}}\n"
    )


def _wgmma_source(n: int) -> str:
    return (
        "\n// tensorforge: TF32 wgmma (sm_90a) on K-major sw128 float32 tiles (ops/wgmma_tf32.py)\n"
        "namespace tf_wg32 {\n"
        "__device__ __forceinline__ unsigned long long desc(unsigned addr) {  // 128B swizzle\n"
        "  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) |\n"
        "         (static_cast<unsigned long long>(1024 >> 4) << 32) | (1ull << 62);\n"
        "}\n"
        "template <int N> __device__ void wgmma_k8(float*, unsigned long long, unsigned long long);\n"
        + _wgmma_asm(n)
        + "}  // namespace tf_wg32\n"
        + WGMMA_TF32_TAIL
    )


WGMMA_TF32_TAIL = r"""
template <int WM, int WN>
__device__ __forceinline__ void tf_wgmma_tf32_fill_zero(float* acc) {
#pragma unroll
  for (int i = 0; i < WM * WN / 32; ++i) acc[i] = 0.f;
}
// acc (this warp's 16 x WN of its warpgroup's 64 x WN tile) += a[16, 32] @ b[WN, 32]^T: `a` is
// this warp's 16 rows of the warpgroup's K-major sw128 tile, `b` the K-major [WN][32] tile of
// B; each 128 bytes a row. The 4 warps of a warpgroup hold consecutive 16-row slices.
template <int WM, int WN, int WK, int PENDING, int FENCE = 1>
__device__ __forceinline__ void tf_wgmma_sync_tf32(float* acc, const float* a, const float* b) {
  static_assert(WM == 16 && WK == 32 && WN % 8 == 0, "tf32 wgmma: 16-row warp slices, k 32");
  const unsigned warp = ((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32) % 4;
  const unsigned a0 = static_cast<unsigned>(__cvta_generic_to_shared(a)) - warp * 16 * 128;
  const unsigned b0 = static_cast<unsigned>(__cvta_generic_to_shared(b));
  if (FENCE) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // cp.async's tiles
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < WK / 8; ++kk)  // a k8 step: 8 floats = 32 bytes along every row
    tf_wg32::wgmma_k8<WN>(acc, tf_wg32::desc(a0 + kk * 32), tf_wg32::desc(b0 + kk * 32));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  // PENDING 1: return with this step's group in flight, the last step's done (its tiles free)
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(PENDING) : "memory");
}
"""


@functools.cache
def wgmma_tf32_sync(wm: int, wn: int, wk: int = K_STEP, pending: int = 0) -> TensorIntrin:
    """acc[wm, wn] (+)= sum_k a[wm, k] * b[wn, k] by wgmma.mma_async.m64n{wn}k8.tf32 with a
    float32 "warp" accumulator: wm = 16 (a warp's slice of its warpgroup's 64 rows), wk = 32;
    a and b are K-major sw128 float32 tiles in shared memory (wgmma.swizzled_fill). `pending` as
    ops/wgmma.py's wgmma_sync."""
    if pending not in (0, 1):
        raise ScheduleError(f"wgmma_tf32_sync: pending must be 0 or 1, got {pending}")
    if wm != 16 or wk != K_STEP or wn % 64 or not 64 <= wn <= 256:
        raise ScheduleError(
            f"wgmma_tf32_sync: a warp's tile is 16 rows of its warpgroup's 64, k 32, n 64 to "
            f"256 in steps of 64; got {wm} x {wn} x {wk}"
        )
    a = te.placeholder((wm, wk), "float32", name="a")
    b = te.placeholder((wn, wk), "float32", name="b")
    k = te.reduce_axis((0, wk), name="k")
    c = te.compute((wm, wn), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="c")
    binds = {
        a: tir.decl_buffer(a.shape, "float32", "A", strides=[wk, 1], scope="shared"),
        b: tir.decl_buffer(b.shape, "float32", "B", strides=[wk, 1], scope="shared"),
        c: tir.decl_buffer(c.shape, "float32", "C", scope="warp"),
    }

    def fintrin(ins, outs):
        aa, bb = ins
        (cc,) = outs
        reset = tir.call_extern(
            "handle", f"tf_wgmma_tf32_fill_zero<{wm}, {wn}>", cc.access_ptr("w")
        )
        update = tir.call_extern(
            "handle", f"tf_wgmma_sync_tf32<{wm}, {wn}, {wk}, {pending}>", cc.access_ptr("rw"),
            aa.access_ptr("r"), bb.access_ptr("r"),
        )  # fmt: skip
        return [reset, update], reset, update

    return te.decl_tensor_intrin(
        c.op, fintrin, name=f"wgmma_tf32_{wm}x{wn}x{wk}_p{pending}", binds=binds,
        device_source=_wgmma_source(wn),
    )  # fmt: skip


def round_to_tf32(t):
    """A float32 torch tensor rounded to TF32 (10-bit mantissas, to nearest, ties away from
    zero: cvt.rna's rounding), still float32: what the tensor cores then read exactly."""
    import torch

    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    finite = torch.isfinite(t)
    return torch.where(finite, rounded, t)
