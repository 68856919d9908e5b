"""CUDA C for calls out of a kernel (tensor intrinsics, `te.extern` device functions) and for
their pointer arguments; the device code that tensor-core intrinsics bring with them.

A call prints as `name(args)`; its `source` (the intrinsic's device code) is emitted once before
the kernel. A pointer argument `&buf[i]` prints as that address; "warp"-scope buffers hold
tensor-core accumulator fragments (each lane keeps 1/32 of the tile, in the layout the
intrinsic defines), so only their first element can be passed: the whole fragment.
"""

from __future__ import annotations

from typing import Any

from tensorforge.codegen.base import TensorMap
from tensorforge.errors import BuildError
from tensorforge.ir.arith import simplify_expr
from tensorforge.ir.expr import Buffer, BufferLoad, Ramp
from tensorforge.ir.extern import AddressOf, WholeBuffer
from tensorforge.ir.visit import walk
from tensorforge.te import dtype as dt
from tensorforge.te import expr as E
from tensorforge.te.extern_call import ExternCall

WARP = 32
# device functions of tensor intrinsics (ops/wgmma.py) that issue cp.async copies themselves: a
# pipeline fill calling one arrives on its barrier when its copies land
ASYNC_FILL_CALLS = ("tf_cp_async_sw128",)
# ... those that fill a tile by bulk tensor copies (TMA) through a tensor map of a kernel argument
TMA_LOADS = ("tf_tma_sw128",)
TMA_CALLS = (*TMA_LOADS, "tf_tma_store")
# ... and those whose shared operands are still read after they return (wgmma.mma_async, until
# a wgmma.wait_group)
ASYNC_READ_CALLS = ("tf_wgmma_sync",)
# ... and those that read or write 128B-swizzled shared tiles: shared memory aligned to 1024 bytes
SWIZZLED_CALLS = ("tf_cp_async_sw128", "tf_wgmma_sync", *TMA_CALLS)
# ... and those that complete on the pipeline fill's "full" mbarrier (it is passed last)
BULK_CALLS = ("tf_bulk_rows", *TMA_LOADS)


def print_call(printer: Any, e: ExternCall, lane: int | None) -> str:
    if e.kind not in ("extern", "pure_extern"):
        raise BuildError(
            f"CUDA codegen: a {e.kind} call ('{e.name}') cannot run on the GPU; call a device "
            f"function with tf.tir.call_extern (and give its code as device_source)"
        )
    if e.source and e.source not in printer.device_sources:
        printer.device_sources.append(e.source)
    if e.name.startswith(TMA_CALLS):  # the source is the kernel's tensor map of its buffer
        dst, src, *rest = e.args  # (for a store: the accumulator, then D's address)
        maps = getattr(printer, "tensor_maps", {})
        if not isinstance(src, AddressOf) or src.load.buffer.name not in maps:
            raise BuildError(
                f"CUDA codegen: {e.name} copies from a kernel argument's buffer through its "
                f"tensor map; got {src!r}"
            )
        args = [printer(dst, lane), maps[src.load.buffer.name]]
        args += [printer(a, lane) for a in rest]
    else:
        args = [printer(a, lane) for a in e.args]
    if e.name.startswith(ASYNC_FILL_CALLS):  # 16-byte copies: the caller's buffer must be aligned
        src = e.args[1]
        if isinstance(src, AddressOf) and src.load.buffer.scope == "global":
            name = printer.names.buffer(src.load.buffer)
            printer.vector_params[name] = max(printer.vector_params.get(name, 0), 16)
    if e.name.startswith(BULK_CALLS):  # completes on the pipeline fill's "full" mbarrier
        bar = getattr(printer, "fill_barrier", None)
        if bar is None:
            raise BuildError(
                f"CUDA codegen: {e.name} fills a shared tile by bulk copies; it must be the fill "
                f"of a double_buffer(stages, sync='mbarrier') pipeline"
            )
        args.append(bar)
    return f"{e.name}({', '.join(args)})"


def tensor_maps(func: Any, body: Any) -> tuple[TensorMap, ...]:
    """The tensor maps of `func`'s buffer arguments that bulk tensor copies (TMA_CALLS) in
    `body` read, one a buffer: each seen as [all leading dims][last dim], boxes of the call's
    ROWS x 64."""
    params = {p.name: p for p in func.params if isinstance(p, Buffer)}
    maps: dict[str, TensorMap] = {}
    for n in walk(body):
        if not (isinstance(n, ExternCall) and n.name.startswith(TMA_CALLS)):
            continue
        src = n.args[1]
        buf = params.get(src.load.buffer.name) if isinstance(src, AddressOf) else None
        shape = [
            int(s.value) if isinstance(s, E.Const) else None for s in (buf.shape if buf else ())
        ]
        if buf is None or not shape or None in shape:
            raise BuildError(
                f"CUDA codegen: {n.name} reads through a tensor map, so its source must be a "
                f"kernel argument of constant shape; got {src!r}"
            )
        rows = int(n.name.split("<", 1)[1].split(",", 1)[0])
        lead = 1
        for s in shape[:-1]:
            lead *= s
        spec = TensorMap(buf.name, buf.dtype, lead, shape[-1], rows, 64)
        if maps.setdefault(buf.name, spec) != spec:
            raise BuildError(
                f"CUDA codegen: bulk tensor copies of '{buf.name}' in boxes of two sizes "
                f"({maps[buf.name]} and {spec}); one tensor map a buffer"
            )
    return tuple(maps.values())


def print_address(printer: Any, e: AddressOf | WholeBuffer) -> str:
    if isinstance(e, WholeBuffer):
        raise BuildError(
            f"CUDA codegen: buffer '{e.buffer.name}' is passed whole (a packed-function "
            f"argument); pass its address (buffer.access_ptr('r'))"
        )
    load = e.load
    name = printer.names.buffer(load.buffer)
    (index,) = load.indices
    if load.buffer.scope == "warp":
        index = simplify_expr(index)
        if not (isinstance(index, E.Const) and int(index.value) == 0):
            raise BuildError(
                f"CUDA codegen: warp-scope fragment '{load.buffer.name}' is passed at offset "
                f"{index}; a tensor intrinsic must take the whole fragment (tensorize the tile "
                f"the fragment holds)"
            )
        return name
    return f"(&{name}[{printer(index)}])"


def warp_fragment_size(name: str, count: int) -> int:
    """Elements each lane holds of a warp-scope buffer of `count` elements."""
    if count % WARP:
        raise BuildError(
            f"warp-scope buffer '{name}' has {count} elements, not a multiple of {WARP}: a "
            f"fragment is spread over the 32 lanes of a warp"
        )
    return count // WARP


# -- asynchronous copies into double-buffered shared tiles ---------------------------------------

ASYNC_COPY_SOURCE = r"""
// cp.async: a global -> shared copy that does not stall the thread (sm_80+); each fill of a
// multi-buffered tile is one commit group, and the barrier before a tile is read first waits for
// its group (cp.async.wait_group: all but the fills still ahead; other barriers wait for all)
template <int BYTES>
__device__ __forceinline__ void tf_cp_async(void* shared_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  if (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(global_src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" :: "r"(dst), "l"(global_src), "n"(BYTES));
}
"""
MBARRIER_SOURCE = r"""
// mbarriers of a pipeline of shared tiles (double_buffer(sync="mbarrier")): "full" counts one
// arrival a thread, made when that thread's cp.async copies into the slot have landed; "empty"
// one a warp, made once the warp is done reading the slot. A wait names the phase's parity.
__device__ __forceinline__ unsigned tf_mbar_addr(const unsigned long long* bar) {
  return static_cast<unsigned>(__cvta_generic_to_shared(bar));
}
__device__ __forceinline__ void tf_mbar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(tf_mbar_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void tf_mbar_arrive(unsigned long long* bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}" :: "r"(tf_mbar_addr(bar)) : "memory");
}
__device__ __forceinline__ void tf_mbar_cp_arrive(unsigned long long* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(tf_mbar_addr(bar)) : "memory");
}
__device__ __forceinline__ void tf_mbar_warp_arrive(unsigned long long* bar) {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  __syncwarp();
  if (lane == 0) tf_mbar_arrive(bar);
}
__device__ __forceinline__ void tf_cluster_sync() {
  asm volatile("fence.mbarrier_init.release.cluster;\n"
               "barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// a warp done with a slot tells every block of the cluster (their bulk fills write here too)
__device__ __forceinline__ void tf_mbar_warp_arrive_cluster(unsigned long long* bar, unsigned n) {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  __syncwarp();
  if (lane < n) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(tf_mbar_addr(bar)), "r"(lane));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
  }
}
__device__ __forceinline__ void tf_mbar_wait_cluster(unsigned long long* bar, int parity) {
  unsigned done;
  do {
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(tf_mbar_addr(bar)), "r"(parity) : "memory");
  } while (!done);
}
__device__ __forceinline__ void tf_mbar_wait(unsigned long long* bar, int parity) {
  unsigned done;
  do {
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(tf_mbar_addr(bar)), "r"(parity) : "memory");
#else
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(tf_mbar_addr(bar)), "r"(parity) : "memory");
#endif
  } while (!done);
}
"""
ASYNC_WAIT = 'asm volatile("cp.async.wait_all;" ::: "memory");'
ASYNC_COMMIT = 'asm volatile("cp.async.commit_group;" ::: "memory");'


def async_wait_group(pending: int) -> str:
    """Wait until at most `pending` of this thread's commit groups are still in flight."""
    return f'asm volatile("cp.async.wait_group {pending};" ::: "memory");'


def async_copy_lines(printer: Any, store: Any, arch: str) -> list[str] | None:
    """cp.async statements for a copy of global memory into a double-buffered shared tile
    (`store`), or None where it is not one (or the architecture predates cp.async).

    Only fills of tiles `inject_double_buffer` manages qualify: each is a commit group, and the
    barrier before the tile is read waits for that group."""
    value = store.value
    if (
        not _has_async_copy(arch)
        or store.buffer.scope != "shared"
        or store.predicate is not None
        or not isinstance(value, BufferLoad)
        or value.buffer.scope != "global"
        or value.predicate is not None
        or value.buffer.dtype != store.buffer.dtype
        or not isinstance(store.indices[0], Ramp)
    ):
        return None
    dst = printer.vector_access(store.buffer, store.indices[0], None)
    src = printer.vector_access(value.buffer, value.indices[0], None)
    if dst is None or src is None:
        return None
    chunk = min(dst.chunk, src.chunk)
    nbytes = chunk * max(1, dt.bits_of(store.buffer.dtype) // 8)
    if nbytes not in (4, 8, 16):
        return None
    d_name, s_name = printer.names.buffer(store.buffer), printer.names.buffer(value.buffer)
    printer.vector_params[s_name] = max(printer.vector_params.get(s_name, 0), nbytes)
    if ASYNC_COPY_SOURCE not in printer.device_sources:
        printer.device_sources.append(ASYNC_COPY_SOURCE)
    lines = [f"// cp.async of {store.buffer.name}: {dst.lanes} elements, {nbytes} bytes a copy"]
    for k in range(dst.lanes // chunk):
        d_off = printer._offset(dst.base, k * chunk)
        s_off = printer._offset(src.base, k * chunk)
        lines.append(f"tf_cp_async<{nbytes}>(&{d_name}[{d_off}], &{s_name}[{s_off}]);")
    return lines


def _has_async_copy(arch: str) -> bool:
    digits = "".join(ch for ch in (arch or "") if ch.isdigit())
    return bool(digits) and int(digits) >= 80
