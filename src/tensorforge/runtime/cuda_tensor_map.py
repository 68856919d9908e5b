"""Tensor maps for bulk tensor copies (TMA, sm_90): the 128-byte descriptor of each
codegen.base.TensorMap, encoded by the driver's cuTensorMapEncodeTiled from the buffer's
address and kept in device memory, where the kernel reads it through a pointer (cached per
address and device). By value as a `__grid_constant__` parameter it did not arrive: pycuda's
packed parameter buffer broke it (an illegal instruction at the copy, H100, pycuda 2026.1)."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from tensorforge.codegen.base import TensorMap
from tensorforge.errors import ArgumentError, DeviceError
from tensorforge.runtime import cuda_driver

MAP_BYTES = 128
_SWIZZLE_128B = 3
_L2_PROMOTION_256B = 3
_UNSIGNED_OF_SIZE = {1: 0, 2: 1, 4: 2, 8: 4}  # CU_TENSOR_MAP_DATA_TYPE_UINT8/16/32/64
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "uint16": 2, "int16": 2, "float32": 4, "int8": 1, "uint8": 1}  # fmt: skip

_lock = threading.Lock()
_encode = None
_cache: dict[tuple[TensorMap, int], bytes] = {}
_on_device: dict[tuple[TensorMap, int, int], Any] = {}
_retired: list = []  # descriptors dropped from _on_device, never freed


def _encoder():
    global _encode
    if _encode is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise DeviceError(f"tensor maps need the CUDA driver (libcuda): {error}") from None
        fn = lib.cuTensorMapEncodeTiled
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p,
                       u64p, u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]  # fmt: skip
        fn.restype = ctypes.c_int
        _encode = fn
    return _encode


def encode(spec: TensorMap, address: int) -> bytes:
    """The descriptor of `spec` for a buffer at device `address`."""
    key = (spec, address)
    with _lock:
        found = _cache.get(key)
    if found is not None:
        return found
    size = _ITEMSIZE.get(spec.dtype)
    if size is None:
        raise ArgumentError(f"tensor map of '{spec.param}': no bulk copies of {spec.dtype}")
    if address % 16 or (spec.cols * size) % 16:
        raise ArgumentError(
            f"tensor map of '{spec.param}': bulk tensor copies need a 16-byte aligned buffer "
            f"(at {address:#x}) and rows of a multiple of 16 bytes ({spec.cols} x {size})"
        )
    raw = ctypes.create_string_buffer(MAP_BYTES + 64)  # the descriptor is 64-byte aligned
    at = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % 64
    dims = (ctypes.c_uint64 * 2)(spec.cols, spec.rows)
    strides = (ctypes.c_uint64 * 1)(spec.cols * size)
    box = (ctypes.c_uint32 * 2)(spec.box_cols, spec.box_rows)
    ones = (ctypes.c_uint32 * 2)(1, 1)
    status = _encoder()(at, _UNSIGNED_OF_SIZE[size], 2, address, dims, strides, box, ones, 0,
                        _SWIZZLE_128B, _L2_PROMOTION_256B, 0)  # fmt: skip
    if status != 0:
        raise DeviceError(
            f"cuTensorMapEncodeTiled failed ({status}) for '{spec.param}': {spec} at {address:#x}"
        )
    out = ctypes.string_at(at, MAP_BYTES)
    with _lock:
        if len(_cache) > 256:
            _cache.clear()
        _cache[key] = out
    return out


def device_map(spec: TensorMap, address: int, device_id: int = 0) -> int:
    """The device address of `spec`'s descriptor for a buffer at `address` (copied there once)."""
    key = (spec, address, device_id)
    with _lock:
        found = _on_device.get(key)
    if found is None:
        cuda = cuda_driver.driver()
        found = cuda.mem_alloc(MAP_BYTES)
        cuda.memcpy_htod(found, encode(spec, address))
        with _lock:
            if len(_on_device) > 256:  # (kept allocated: a CUDA graph's node may hold one)
                _retired.extend(_on_device.values())
                _on_device.clear()
            found = _on_device.setdefault(key, found)
    return int(found)
