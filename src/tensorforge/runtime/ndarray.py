"""NDArray: a dense array on a device (numpy memory, 64-byte aligned, on the CPU), plus DLPack.

The GPU side lives in `runtime/cuda_ndarray.py`, imported only when a CUDA array is asked for.
That module provides `empty(shape, dtype, dev)`, `array(np_array, dev)`, `from_dlpack(obj)` and
`synchronize(dev)`; its arrays are NDArray subclasses that override the storage-dependent members
(`numpy`, `copyfrom`, `data_ptr`, `shape`, `dtype`, DLPack) and expose
`__cuda_array_interface__`, which is how `Module` reads them.
"""

from __future__ import annotations

import math
from types import ModuleType

import numpy as np

from tensorforge.errors import ArgumentError, DeviceError
from tensorforge.runtime.device import (
    DLPACK_CPU,
    DLPACK_CUDA,
    DLPACK_CUDA_HOST,
    Device,
    cpu,
    require_cuda,
)
from tensorforge.te.dtype import SCALAR_DTYPES

ALIGNMENT = 64  # bytes; the LLVM backend tells LLVM that buffers it allocates are this aligned


class NDArray:
    """A dense, row-major array on a device. Create one with `tf.nd.array`, `tf.nd.empty` or
    `tf.nd.from_dlpack`; pass it to a built module; read it back with `.numpy()`.

    On the CPU it owns (or, after `from_dlpack`, shares) a numpy array; arrays that tensorforge
    allocates start on a 64-byte boundary.
    """

    __slots__ = ("_array", "_data_ptr", "_device")

    def __init__(self, array: np.ndarray, dev: Device | None = None):
        # NOTE: this class is the CPU array; GPU arrays are subclasses (runtime/cuda_ndarray.py).
        assert dev is None or dev.kind == "cpu", (
            "NDArray holds host memory; use tf.nd.array(x, dev)"
        )
        self._array = array
        self._device = dev if dev is not None else cpu(0)
        self._data_ptr = array.ctypes.data

    # -- what it is ---------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> str:
        return self._array.dtype.name

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def data_ptr(self) -> int:
        """Address of the first element (an int), as kernels receive it."""
        return self._data_ptr

    @property
    def handle(self) -> int:
        """Same as `data_ptr`."""
        return self.data_ptr

    # -- data in and out ----------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A numpy copy of the contents."""
        return self._array.copy()

    def asnumpy(self) -> np.ndarray:
        """Old TVM spelling of `numpy()`."""
        return self.numpy()

    def copyfrom(self, source: NDArray | np.ndarray | object) -> NDArray:
        """Overwrite the contents from an array of the same shape (converting the dtype, as TVM)."""
        if isinstance(source, NDArray):
            source = source.numpy()
        source = np.asarray(source)
        if source.shape != self.shape:
            raise ArgumentError(
                f"copyfrom: shape mismatch: this array has shape {self.shape}, "
                f"the source {source.shape}"
            )
        np.copyto(self._array, source, casting="unsafe")
        return self

    def copyto(self, target: NDArray | Device) -> NDArray:
        """Copy into another NDArray, or into a new array on the Device `target`."""
        if isinstance(target, Device):
            return array(self.numpy(), target)
        if isinstance(target, NDArray):
            return target.copyfrom(self)
        raise ArgumentError(f"copyto: expected an NDArray or a Device, got {type(target).__name__}")

    def __setitem__(self, key: object, value: object) -> None:
        """`a[:] = x` copies `x` in (TVM supports only the full slice)."""
        if not (isinstance(key, slice) and key == slice(None)):
            raise ArgumentError("NDArray supports only full-slice assignment `a[:] = value`")
        if isinstance(value, (NDArray, np.ndarray)):
            self.copyfrom(value)
        else:
            self.copyfrom(np.broadcast_to(np.asarray(value, dtype=self.dtype), self.shape))

    def __array__(self, dtype: object = None, copy: bool | None = None) -> np.ndarray:
        # numpy's protocol: np.asarray(nd) shares the memory, np.array(nd) copies.
        result = self._array if dtype is None else self._array.astype(dtype, copy=False)
        return result.copy() if copy and result is self._array else result

    # -- DLPack (sharing memory with numpy, torch, ...) ---------------------------------------
    def __dlpack__(self, **kwargs: object) -> object:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CPU, 0)

    def __repr__(self) -> str:
        return f"<tf.nd.NDArray shape={self.shape}, {self.dtype}, {self.device}>\n{self._array!r}"


def empty(
    shape: int | tuple[int, ...] | list[int], dtype: str = "float32", dev: Device | None = None
) -> NDArray:
    """An uninitialized array of `shape` and `dtype` on `dev` (default the CPU)."""
    dev = _check_device(dev, "empty")
    shape = _check_shape(shape)
    dtype = _check_dtype(dtype, "empty")
    if dev.kind == "cuda":
        return cuda_backend(dev, "tf.nd.empty").empty(shape, dtype, dev)
    return NDArray(aligned_empty(shape, dtype), dev)


def array(source: object, dev: Device | None = None) -> NDArray:
    """A new array on `dev` (default the CPU) holding a copy of `source` (numpy array, NDArray,
    list, DLPack object...). The dtype is the source's."""
    dev = _check_device(dev, "array")
    if isinstance(source, NDArray):
        source = source.numpy()
    try:
        source = np.asarray(source)
    except ValueError as err:  # e.g. a ragged nested list
        raise ArgumentError(f"tf.nd.array: cannot make an array of {source!r}: {err}") from None
    dtype = _check_dtype(source.dtype, "array")
    if dev.kind == "cuda":
        return cuda_backend(dev, "tf.nd.array").array(np.ascontiguousarray(source, dtype), dev)
    result = aligned_empty(source.shape, dtype)
    np.copyto(result, source)
    return NDArray(result, dev)


def from_dlpack(source: object) -> NDArray:
    """An NDArray sharing memory with a DLPack producer (torch tensor, numpy array, ...).

    NOTE: shared memory keeps the producer's layout: it may be neither 64-byte aligned (fine for
    kernels) nor C-contiguous (a module call then raises ArgumentError).
    """
    if not hasattr(source, "__dlpack__"):
        raise ArgumentError(
            f"from_dlpack: {type(source).__name__} does not support DLPack (no __dlpack__)"
        )
    device_type, index = source.__dlpack_device__()
    if device_type == DLPACK_CUDA:
        dev = Device("cuda", index)
        return cuda_backend(dev, "tf.nd.from_dlpack").from_dlpack(source)
    if device_type not in (DLPACK_CPU, DLPACK_CUDA_HOST):
        raise ArgumentError(f"from_dlpack: unsupported DLPack device type {device_type}")
    try:
        shared = np.from_dlpack(source)
    except (BufferError, TypeError, RuntimeError) as error:
        raise ArgumentError(
            f"from_dlpack: cannot import {type(source).__name__}: {error}"
        ) from None
    _check_dtype(shared.dtype, "from_dlpack")
    return NDArray(shared, cpu(0))


def aligned_empty(shape: tuple[int, ...], dtype: str | np.dtype) -> np.ndarray:
    """An uninitialized numpy array whose data starts on an ALIGNMENT-byte boundary."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    nbytes = max(size, 1) * dtype.itemsize  # NOTE: numpy moves the pointer of an empty slice
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + nbytes].view(dtype)[:size].reshape(shape)


def cuda_backend(dev: Device, what: str = "CUDA arrays") -> ModuleType:
    """runtime/cuda_ndarray.py, imported on first use; DeviceError if the GPU side is missing."""
    require_cuda(dev, what)
    try:
        from tensorforge.runtime import cuda_ndarray
    except ImportError as error:
        raise DeviceError(f"{what}: CUDA arrays are unavailable ({error})") from None
    return cuda_ndarray


def _check_device(dev: object, what: str) -> Device:
    if dev is None:
        return cpu(0)
    if not isinstance(dev, Device):
        raise ArgumentError(f"tf.nd.{what}: dev must be a Device such as tf.cpu(0), got {dev!r}")
    return dev


def _check_shape(shape: object) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        raise ArgumentError(f"tf.nd.empty: shape must be a tuple of ints, got {shape!r}") from None
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise ArgumentError(f"tf.nd.empty: shape must hold non-negative ints, got {shape!r}")
    return tuple(int(dim) for dim in dims)


def _check_dtype(dtype: object, what: str) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    if name not in SCALAR_DTYPES:
        raise ArgumentError(
            f"tf.nd.{what}: unsupported dtype {name!r}; expected one of {', '.join(SCALAR_DTYPES)}"
        )
    return name
