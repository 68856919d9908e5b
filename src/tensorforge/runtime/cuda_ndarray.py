"""GPU arrays: `CUDANDArray`, an NDArray in CUDA device memory (pycuda allocations), plus DLPack.

runtime/ndarray.py calls `empty`, `array`, `from_dlpack` and `synchronize` here for cuda
devices. Arrays expose `__cuda_array_interface__` (how modules, torch, cupy and numba read them)
and `__dlpack__` / `__dlpack_device__` (`torch.from_dlpack(a)` shares the memory). Importing
works both ways: anything with `__cuda_array_interface__` or a CUDA `__dlpack__` is wrapped
without a copy. All copies run on the legacy default stream, so they are ordered after the
kernels launched before them.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import Any

import numpy as np

from tensorforge.errors import ArgumentError, DeviceError
from tensorforge.runtime import cuda_driver
from tensorforge.runtime.device import DLPACK_CUDA, Device
from tensorforge.runtime.ndarray import NDArray


def _device_index(dev: Any) -> int:
    if isinstance(dev, int):
        return dev
    return int(getattr(dev, "index", getattr(dev, "device_id", 0)))


def _as_device(dev: Any) -> Device:
    return dev if isinstance(dev, Device) else Device("cuda", _device_index(dev))


class CUDANDArray(NDArray):
    """A dense array in GPU memory. It owns its allocation, or shares another library's memory
    (then `owner` keeps that memory alive). `strides` (bytes) is None for C-contiguous."""

    __slots__ = ("__weakref__", "_allocation", "_dtype", "_owner", "_shape", "_strides")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: str,
        dev: Any,
        pointer: int | None = None,
        owner: Any = None,
        strides: tuple[int, ...] | None = None,
    ) -> None:
        self._shape = tuple(int(d) for d in shape)
        self._dtype = np.dtype(dtype).name
        self._device = _as_device(dev)
        self._array = None
        self._owner = owner
        self._strides = strides
        self._allocation = None
        if pointer is None:
            cuda = cuda_driver.driver()
            cuda_driver.activate(self._device.index)
            try:
                self._allocation = cuda.mem_alloc(max(self.nbytes, 1))
            except cuda.Error as error:
                raise DeviceError(
                    f"cannot allocate {self.nbytes} bytes on {self._device}: {error}"
                ) from None
            pointer = int(self._allocation)
        self._data_ptr = int(pointer)

    # -- what it is -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self._shape) * np.dtype(self._dtype).itemsize

    @property
    def is_contiguous(self) -> bool:
        return self._strides is None or self._strides == _c_strides(self._shape, self._dtype)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self._shape,
            "typestr": np.dtype(self._dtype).str,
            "data": (self._data_ptr, False),
            "strides": self._strides,
            "version": 3,
        }

    # -- data in and out ------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host copy of the contents (waits for the kernels launched before it)."""
        out = np.empty(self._shape, dtype=self._dtype)
        if out.size:
            if not self.is_contiguous:
                raise ArgumentError(
                    f"numpy(): this array is a strided view (strides {self._strides})"
                )
            cuda = cuda_driver.driver()
            cuda_driver.activate(self._device.index)
            cuda.memcpy_dtoh(out, self._data_ptr)
        return out

    def copyfrom(self, source: Any) -> CUDANDArray:
        """Overwrite the contents from a host or device array of the same shape."""
        if not self.is_contiguous:
            raise ArgumentError("copyfrom: cannot copy into a strided view")
        interface = getattr(source, "__cuda_array_interface__", None)
        if interface is not None:
            shape = tuple(interface["shape"])
            self._check_shape(shape)
            same_dtype = np.dtype(interface["typestr"]) == np.dtype(self._dtype)
            strides = interface.get("strides")
            contiguous = strides is None or tuple(strides) == _c_strides(shape, self._dtype)
            if same_dtype and contiguous:
                if self.nbytes:
                    cuda = cuda_driver.driver()
                    cuda_driver.activate(self._device.index)
                    cuda.memcpy_dtod(self._data_ptr, interface["data"][0], self.nbytes)
                return self
            source = source.numpy() if hasattr(source, "numpy") else _host_copy(source)
        elif isinstance(source, NDArray):
            source = source.numpy()
        host = np.asarray(source)
        self._check_shape(host.shape)
        host = np.ascontiguousarray(host.astype(self._dtype, copy=False))
        if host.size:
            cuda = cuda_driver.driver()
            cuda_driver.activate(self._device.index)
            cuda.memcpy_htod(self._data_ptr, host)
        return self

    def _check_shape(self, shape: tuple[int, ...]) -> None:
        if tuple(shape) != self._shape:
            raise ArgumentError(
                f"copyfrom: shape mismatch: this array has shape {self._shape}, the source {tuple(shape)}"
            )

    def __array__(self, dtype: object = None, copy: bool | None = None) -> np.ndarray:
        host = self.numpy()  # NOTE: GPU memory cannot be shared with numpy: always a copy
        return host if dtype is None else host.astype(dtype, copy=False)

    # -- DLPack ---------------------------------------------------------------------------------
    def __dlpack__(
        self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        if copy:
            raise BufferError("CUDANDArray.__dlpack__: copy=True is not supported")
        if stream not in (None, 1):  # the consumer works on another stream: finish ours first
            cuda_driver.synchronize(self._device.index)
        return _export_dlpack(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self._device.index)

    def __repr__(self) -> str:
        return (
            f"<tf.nd.NDArray shape={self._shape}, {self._dtype}, {self._device}>\n{self.numpy()!r}"
        )


def _c_strides(shape: tuple[int, ...], dtype: str) -> tuple[int, ...]:
    strides, step = [], np.dtype(dtype).itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= max(dim, 1)
    return tuple(reversed(strides))


def _host_copy(source: Any) -> np.ndarray:
    """A numpy copy of a foreign device array, through a temporary CUDANDArray."""
    wrapped = from_dlpack(source)
    if not wrapped.is_contiguous:
        raise ArgumentError(
            "copyfrom: the source is a non-contiguous device array; make it contiguous"
        )
    return wrapped.numpy()


# -- the functions runtime/ndarray.py calls ---------------------------------------------------


def empty(shape: tuple[int, ...], dtype: str, dev: Any) -> CUDANDArray:
    """An uninitialized array on the GPU."""
    return CUDANDArray(tuple(shape), dtype, dev)


def array(source: np.ndarray, dev: Any) -> CUDANDArray:
    """A GPU copy of the host array `source`."""
    host = np.ascontiguousarray(source)
    out = CUDANDArray(host.shape, host.dtype.name, dev)
    return out.copyfrom(host)


def synchronize(dev: Any) -> None:
    cuda_driver.synchronize(_device_index(dev))


def from_dlpack(source: Any) -> CUDANDArray:
    """Share the memory of a GPU array from another library (no copy)."""
    if isinstance(source, CUDANDArray):
        return source
    interface = getattr(source, "__cuda_array_interface__", None)
    if interface is not None:
        return _from_interface(source, interface)
    if hasattr(source, "__dlpack__"):
        return _import_dlpack(source)
    raise ArgumentError(
        f"from_dlpack: {type(source).__name__} has neither __cuda_array_interface__ nor __dlpack__"
    )


# the names the issue asked for
empty_cuda = empty
array_cuda = array


def _from_interface(owner: Any, interface: dict) -> CUDANDArray:
    shape = tuple(interface["shape"])
    dtype = np.dtype(interface["typestr"]).name
    pointer = interface["data"][0] or 0
    strides = interface.get("strides")
    strides = None if strides is None else tuple(strides)
    if strides is not None and strides == _c_strides(shape, dtype):
        strides = None
    device = _owner_device(owner)
    return CUDANDArray(shape, dtype, Device("cuda", device), pointer, owner=owner, strides=strides)


def _owner_device(owner: Any) -> int:
    """The GPU index of a foreign array (torch's `.device.index`, cupy's `.device.id`), else 0."""
    device = getattr(owner, "device", None)
    for attribute in ("index", "id"):
        value = getattr(device, attribute, None)
        if isinstance(value, int):
            return value
    return 0


# -- DLPack through ctypes ----------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _Deleter),
]

_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # kDLInt, kDLUInt, kDLFloat, kDLBool
# kDLBfloat (4): bfloat16 arrays are their uint16 bits here (te/dtype.py's storage_dtype)
_DL_KINDS = {0: "int", 1: "uint", 2: "float", 4: "uint", 6: "bool"}
_CAPSULE = b"dltensor"
_USED_CAPSULE = b"used_dltensor"

_capsule_new = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)

_exported: dict[int, tuple[Any, ...]] = {}  # address of a DLManagedTensor -> what it keeps alive


@_Deleter
def _delete_exported(managed: Any) -> None:
    _exported.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule: int) -> None:
    # a capsule nobody consumed still owns its tensor (a consumer renames it "used_dltensor")
    if _capsule_is_valid_raw(capsule, _CAPSULE):
        pointer = _capsule_pointer_raw(capsule, _CAPSULE)
        _delete_exported(ctypes.cast(pointer, ctypes.POINTER(_DLManagedTensor)))


def _export_dlpack(a: CUDANDArray) -> Any:
    dtype = np.dtype(a.dtype)
    managed = _DLManagedTensor()
    ndim = len(a.shape)
    shape = (ctypes.c_int64 * max(ndim, 1))(*a.shape)
    strides = None
    if a._strides is not None:
        itemsize = dtype.itemsize
        strides = (ctypes.c_int64 * max(ndim, 1))(*(s // itemsize for s in a._strides))
    tensor = managed.dl_tensor
    tensor.data = a.data_ptr
    tensor.device = _DLDevice(DLPACK_CUDA, a.device.index)
    tensor.ndim = ndim
    tensor.dtype = _DLDataType(_DL_CODES[dtype.kind], dtype.itemsize * 8, 1)
    tensor.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = (
        None if strides is None else ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    )
    tensor.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _delete_exported
    address = ctypes.addressof(managed)
    _exported[address] = (a, managed, shape, strides)  # alive until the consumer's deleter call
    return _capsule_new(address, _CAPSULE, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class _DLPackOwner:
    """Holds an imported DLManagedTensor; calls its deleter when the wrapping array dies."""

    def __init__(self, address: int, producer: Any) -> None:
        self.producer = producer
        self.managed = ctypes.cast(address, ctypes.POINTER(_DLManagedTensor))
        weakref.finalize(self, _call_deleter, self.managed)


def _call_deleter(managed: Any) -> None:
    deleter = managed.contents.deleter
    if deleter:
        deleter(managed)


def _import_dlpack(source: Any) -> CUDANDArray:
    try:
        capsule = source.__dlpack__(stream=1)
    except TypeError:
        capsule = source.__dlpack__()
    address = _capsule_pointer(capsule, _CAPSULE)
    tensor = ctypes.cast(address, ctypes.POINTER(_DLManagedTensor)).contents.dl_tensor
    if tensor.device.device_type != DLPACK_CUDA:
        raise ArgumentError(
            f"from_dlpack: DLPack device type {tensor.device.device_type} is not CUDA"
        )
    kind = _DL_KINDS.get(tensor.dtype.code)
    if kind is None or tensor.dtype.lanes != 1:
        raise ArgumentError(f"from_dlpack: unsupported DLPack dtype code {tensor.dtype.code}")
    dtype = "bool" if kind == "bool" else f"{kind}{tensor.dtype.bits}"
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    itemsize = np.dtype(dtype).itemsize
    strides = None
    if tensor.strides:
        strides = tuple(tensor.strides[i] * itemsize for i in range(tensor.ndim))
        if strides == _c_strides(shape, dtype):
            strides = None
    _capsule_set_name(capsule, _USED_CAPSULE)  # ours now: its deleter runs when we are done
    owner = _DLPackOwner(address, source)
    pointer = (tensor.data or 0) + tensor.byte_offset
    return CUDANDArray(
        shape, dtype, Device("cuda", tensor.device.device_id), pointer, owner, strides
    )
