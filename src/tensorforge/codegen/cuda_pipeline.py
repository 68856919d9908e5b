"""Printing a pipeline's synchronization in CUDA kernels (inject_double_buffer's statements):
`cp.async` commit and wait groups, the full/empty mbarriers of `double_buffer(sync="mbarrier")`
and the thread-block cluster those barriers may span. A mixin of the kernel writer (cuda.py)."""

from __future__ import annotations

import re

from tensorforge.codegen.cuda_intrin import (
    ASYNC_COMMIT,
    ASYNC_READ_CALLS,
    ASYNC_WAIT,
    BULK_CALLS,
    MBARRIER_SOURCE,
    TMA_LOADS,
    async_wait_group,
)
from tensorforge.errors import BuildError
from tensorforge.ir.stmt import Attr, BufferStore, For, Stmt, Sync
from tensorforge.ir.visit import walk
from tensorforge.te.extern_call import ExternCall


class PipelineWriter:
    """The pipeline statements of `_KernelWriter._stmt`: returns True for one it printed."""

    def _pipeline_stmt(self, s: Stmt) -> bool:
        match s:
            case Sync():
                if self.async_copies:
                    pending = self.async_wait
                    self.line(ASYNC_WAIT if pending is None else async_wait_group(pending))
                self.line("__syncthreads();")
            case Attr(key="async_commit", body=body):  # a fill of a multi-buffered tile
                self.async_depth += 1
                try:
                    self._stmt(body)
                finally:
                    self.async_depth -= 1
                if self.async_copies:
                    self.line(ASYNC_COMMIT)
            case Attr(key="mbarrier_init", value=(name, stages), body=body):
                self._mbarrier_init(name, int(stages), *bulk_fills(body))
                self._stmt(body)
                if self.cluster > 1:  # no block leaves while its peers may still signal it
                    self.line("tf_cluster_sync();")
            case Attr(key="mbarrier_fill", value=(name, slot), body=body):
                before = self.async_copy_count
                bars, _ = self.mbarriers[name]
                self.async_depth += 1
                self.printer.fill_barrier = f"&{bars}[{self.printer(slot)}]"
                try:
                    self._stmt(body)
                finally:
                    self.async_depth -= 1
                    self.printer.fill_barrier = None
                if name in self.tma_pipelines:  # the copy engine's bytes alone complete it
                    return True
                # arrive when this thread's copies land (or now, for plain stores: release)
                arrive = "tf_mbar_cp_arrive" if self.async_copy_count > before else "tf_mbar_arrive"
                self.line(f"{arrive}(&{bars}[{self.printer(slot)}]);")
            case Attr(key="mbarrier_wait", value=(name, which, slot, parity)):
                bars, stages = self.mbarriers[name]
                index = (
                    self.printer(slot) if which == "full" else f"{stages} + {self.printer(slot)}"
                )
                wait = "tf_mbar_wait_cluster" if self.cluster > 1 and which == "empty" else "tf_mbar_wait"  # fmt: skip
                wait = f"{wait}(&{bars}[{index}], {self.printer(parity)});"
                if which == "empty" and name in self.tma_pipelines:  # only the copying thread
                    wait = f"if (threadIdx.x + threadIdx.y + threadIdx.z == 0) {wait}"
                self.line(wait)
            case Attr(key="mbarrier_arrive", value=(name, _, slot)):
                bars, stages = self.mbarriers[name]
                bar = f"&{bars}[{stages} + {self.printer(slot)}]"
                if self.cluster > 1:  # every block of the cluster may refill it (multicast)
                    self.line(f"tf_mbar_warp_arrive_cluster({bar}, {self.cluster});")
                else:
                    self.line(f"tf_mbar_warp_arrive({bar});")
            case Attr(key="pipeline_drain"):  # wgmma's reads of the tiles done (a lag
                # pipeline's compute may be synchronous, with nothing to wait for: no wgmma,
                # and on sm_80 no such instruction)
                if reads_async(self.func.body):
                    self.line('asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");')
            case Attr(key="async_wait", value=pending, body=body):
                self.async_wait = int(pending)
                try:
                    self._stmt(body)
                finally:
                    self.async_wait = None
            case _:
                return False
        return True

    def _mbarrier_init(self, name: str, stages: int, bulk: int = 0, tma_only: bool = False) -> None:
        """Shared mbarriers of a pipeline (inject_double_buffer): full[s] completes when every
        thread's copies into slot s have landed, empty[s] when every warp is done reading it.
        A pipeline filled by bulk tensor copies alone (`tma_only`): full[s] counts only the
        copying thread's arrivals (with their bytes), and only that thread waits for empty[s]."""
        if not has_mbarrier(self.target.arch):
            raise BuildError(
                f"CUDA codegen: double_buffer(sync='mbarrier') of '{name}' needs sm_80 or newer, "
                f"not {self.target.arch}"
            )
        if MBARRIER_SOURCE not in self.printer.device_sources:
            self.printer.device_sources.append(MBARRIER_SOURCE)
        bars = self.names.fresh(re.sub(r"\W", "_", name))
        self.mbarriers[name] = (bars, stages)
        block = self.threads.launch.block
        threads = block[0] * block[1] * block[2]
        self.line(f"__shared__ __align__(8) unsigned long long {bars}[{2 * stages}];")
        full = f"{threads} + {bulk}" if bulk else f"{threads}"
        if tma_only:
            self.tma_pipelines.add(name)
            full = f"{bulk}"
        empty = -(-threads // 32) * self.cluster
        with self.block("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {"):
            with self.block(f"for (int s = 0; s < {stages}; ++s) {{"):
                self.line(f"tf_mbar_init(&{bars}[s], {full});  // full: a thread's copies, a bulk fill's bytes")  # fmt: skip
                self.line(f"tf_mbar_init(&{bars}[{stages} + s], {empty});  // empty: a warp (of each block of the cluster)")  # fmt: skip
        self.line("tf_cluster_sync();" if self.cluster > 1 else "__syncthreads();")


def has_mbarrier(arch: str) -> bool:
    digits = "".join(ch for ch in (arch or "") if ch.isdigit())
    return bool(digits) and int(digits) >= 80


def reads_async(body: Stmt) -> bool:
    """Whether the kernel calls an intrinsic that reads shared memory after it returns (wgmma)."""
    return any(
        isinstance(n, ExternCall) and n.name.startswith(ASYNC_READ_CALLS) for n in walk(body)
    )


def cluster_size(body: Stmt) -> int:
    """The `cluster_dims` pragma's cluster size (1: none); only clusters along x."""
    found = {
        int(value)
        for n in walk(body)
        if isinstance(n, For)
        for name, value in n.pragmas
        if name == "cluster_dims"
    }
    if len(found) > 1 or any(v not in (1, 2, 4, 8) for v in found):
        raise BuildError(f"pragma cluster_dims must be one of 1, 2, 4, 8 (one value), got {sorted(found)}")  # fmt: skip
    return found.pop() if found else 1


def bulk_fills(body: Stmt) -> tuple[int, bool]:
    """Bulk-copy fills (tf_bulk_rows, tf_tma_sw128 calls) in one fill of a pipeline, each
    arming the full barrier once (one arrival), and whether the fill is bulk tensor copies
    alone (no other call, no store)."""
    for n in walk(body):
        if isinstance(n, Attr) and n.key == "mbarrier_fill":
            inner = list(walk(n.body))
            calls = [c for c in inner if isinstance(c, ExternCall)]
            bulk = sum(1 for c in calls if c.name.startswith(BULK_CALLS))
            tma_only = bool(calls) and all(c.name.startswith(TMA_LOADS) for c in calls)
            return bulk, tma_only and not any(isinstance(c, BufferStore) for c in inner)
    return 0, False
