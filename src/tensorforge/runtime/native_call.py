"""Calling native kernels from Python: ctypes argument types, the thread count, libgomp and fork.

Shared by JIT-compiled kernels (llvm_exec.py) and loaded shared libraries (shared_lib.py).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable

from tensorforge.codegen.base import KernelSource
from tensorforge.errors import AllocationError, BuildError

CTYPES = {
    "bool": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}


def argtypes(source: KernelSource) -> list:
    """ctypes argument types of the entry: buffers as addresses, scalars by value."""
    types = []
    for p in source.params:
        if p.kind == "buffer":
            types.append(ctypes.c_void_p)
        elif p.dtype in CTYPES:
            types.append(CTYPES[p.dtype])
        else:
            raise BuildError(
                f"'{source.entry}': scalar parameter '{p.name}' of dtype {p.dtype} "
                f"cannot be passed from Python"
            )
    return types


_default_threads: Callable[[], int] | None = None


def num_threads() -> int:
    """Threads a PARALLEL loop runs on: TF_NUM_THREADS, else the default a front end set
    (`set_default_threads`: the torch backend's is torch.get_num_threads()), else the number
    of CPUs."""
    value = os.environ.get("TF_NUM_THREADS", "")
    if value.strip():
        try:
            return max(1, int(value))
        except ValueError:
            raise BuildError(f"TF_NUM_THREADS={value!r} is not a whole number") from None
    if _default_threads is not None:
        return max(1, int(_default_threads()))
    return os.cpu_count() or 1


def set_default_threads(source: Callable[[], int] | None) -> None:
    """Where TF_NUM_THREADS is unset, PARALLEL loops take `source()` threads (read at each
    call and build); None: all CPUs again."""
    global _default_threads
    _default_threads = source


@functools.lru_cache(maxsize=1)
def make_gomp_fork_safe(library: str = "libgomp.so.1") -> None:
    """Release libgomp's thread pool just before any fork().

    NOTE: libgomp's pool does not survive fork(): a child that runs a parallel loop would wait
    forever for workers that exist only in the parent (tuner workers and the fuzzer fork after
    kernels ran). Released, both processes build a fresh pool on their next parallel loop.
    """
    try:
        gomp = ctypes.CDLL(library)
    except OSError:
        return
    pause = getattr(gomp, "omp_pause_resource_all", None)
    if pause is not None:
        pause.argtypes = [ctypes.c_int]
        os.register_at_fork(before=lambda: pause(1))  # 1 = omp_pause_soft


class AllocErrorSlot(ctypes.Structure):
    """The kernel's ALLOC_ERROR_SYMBOL global (codegen/base.py): a failed heap allocation."""

    _fields_ = [
        ("buffer", ctypes.c_char_p),
        ("count", ctypes.c_int64),
        ("element_bytes", ctypes.c_int64),
    ]


class NativeKernel:
    """What the CPU executables share: `call(raw_args)` (buffers as addresses, scalars as
    numbers, in `source.params` order) sets the thread count of PARALLEL loops before and raises
    a failed heap allocation after. A subclass sets `source` and `_function` (a ctypes function),
    and `_threads` / `_alloc_error` where the kernel defines those globals."""

    source: KernelSource
    _function: ctypes._CFuncPtr
    _threads: ctypes.c_int32 | None = None  # no PARALLEL loop: no thread-count global
    _alloc_error: AllocErrorSlot | None = None  # no heap-allocated intermediate

    def call(self, raw_args: list) -> None:
        """Run the kernel; PARALLEL loops use TF_NUM_THREADS (read now) or all CPUs."""
        if self._threads is not None:
            self._threads.value = num_threads()
        self._function(*raw_args)
        self.check_allocation()

    def check_allocation(self) -> None:
        """AllocationError if the last run's heap allocation failed (the slot is then cleared)."""
        if self._alloc_error is not None and self._alloc_error.buffer:
            raise_alloc_error(self._alloc_error, self.source.entry)


def raise_alloc_error(slot: AllocErrorSlot, entry: str) -> None:
    """Raise AllocationError for the failure `slot` holds (its buffer is set) and clear it.

    NOTE: the slot is one per kernel, not per call: where the same kernel runs in several
    threads at once and one call fails, another may report that failure too.
    """
    name = (slot.buffer or b"?").decode(errors="replace")
    count, element_bytes = int(slot.count), int(slot.element_bytes)
    slot.buffer, slot.count, slot.element_bytes = None, 0, 0
    total = count * element_bytes
    raise AllocationError(
        f"'{entry}' could not allocate its intermediate buffer '{name}': {count} elements of "
        f"{element_bytes} bytes = {total} bytes ({_human(total)}); the allocator refused "
        f"(out of memory, or a symbolic size larger than intended). Nothing was left allocated; "
        f"the outputs are incomplete"
    )


def _human(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.3g} {unit}"
        value /= 1024
    return f"{nbytes} B"
