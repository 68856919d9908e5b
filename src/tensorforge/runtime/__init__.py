"""tensorforge.runtime: run compiled kernels: Device, NDArray, Module (API.md §3)."""

from tensorforge.runtime.device import Device, cpu, cuda, device
from tensorforge.runtime.export import load_module
from tensorforge.runtime.extern_lib import compile_c, load_library
from tensorforge.runtime.module import Function, Module
from tensorforge.runtime.ndarray import NDArray
from tensorforge.runtime.timing import BenchmarkResult

__all__ = [
    "BenchmarkResult",
    "Device",
    "Function",
    "Module",
    "NDArray",
    "compile_c",
    "cpu",
    "cuda",
    "device",
    "load_library",
    "load_module",
]
