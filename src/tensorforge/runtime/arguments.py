"""Call arguments: turn `f(*args)` (arrays and numbers) into a kernel's raw arguments, or say why not.

A `Signature` is built once per compiled function from its `Param`s; each user-visible parameter
gets a precomputed slot that checks and converts one argument, so a call does only the checks
that can fail. Buffers become integer addresses, scalars Python numbers; symbolic sizes
(`bound_from_shape`) are read off the arrays' shapes and never passed by the user.

NOTE: numpy arrays are used in place, never copied (outputs are written into them). They need
not be 64-byte aligned: generated code assumes only element alignment for caller-owned buffers.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tensorforge.errors import ArgumentError, BuildError
from tensorforge.runtime.device import DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST
from tensorforge.runtime.ndarray import NDArray, from_dlpack
from tensorforge.te.dtype import numpy_dtype

if TYPE_CHECKING:
    from tensorforge.codegen.base import Param

# A symbolic size's binding: (value, parameter it came from, dimension or None for a scalar).
Binding = tuple[int, str, "int | None"]


class Signature:
    """Checks and converts the arguments of one compiled function (`function` names it)."""

    def __init__(self, function: str, params: Sequence[Param], device_kind: str):
        self.function = function
        self.params = tuple(params)
        self.user_params = tuple(p for p in self.params if not p.bound_from_shape)
        symbols = {
            d for p in self.params if p.kind == "buffer" for d in p.shape if isinstance(d, str)
        }
        buffer_slot = _CPUBuffer if device_kind == "cpu" else _CUDABuffer
        self.slots: list[_Slot] = []
        for param in self.user_params:
            if param.kind == "buffer":
                self.slots.append(buffer_slot(function, param))
            elif param.kind == "scalar":
                self.slots.append(_Scalar(function, param, in_shapes=param.name in symbols))
            else:
                raise BuildError(
                    f"{function}: parameter '{param.name}' has unknown kind {param.kind!r}"
                )
        # Raw argument order: an int picks a converted user argument, a _BoundSize reads a shape.
        self.layout: list[int | _BoundSize] = []
        user_index = 0
        for param in self.params:
            if param.bound_from_shape:
                if param.name not in symbols:
                    raise BuildError(
                        f"{function}: size parameter '{param.name}' is bound from shapes, "
                        f"but no buffer's shape mentions it"
                    )
                self.layout.append(_BoundSize(function, param))
            else:
                self.layout.append(user_index)
                user_index += 1
        self.has_bound_sizes = len(self.user_params) != len(self.params)
        # (output, other buffer) positions whose memory must not overlap: a kernel reading an
        # input while writing an output over it gives a silently wrong result.
        buffers = [i for i, p in enumerate(self.user_params) if p.kind == "buffer"]
        self.alias_pairs = tuple(
            (w, o) for w in buffers if self.user_params[w].written for o in buffers if o != w
        )

    def convert(self, args: Sequence[object]) -> list:
        """The raw arguments for `args` (in the user's parameter order); ArgumentError if wrong."""
        if len(args) != len(self.slots):
            raise self._count_error(len(args))
        env: dict[str, Binding] = {}
        values = [slot.convert(arg, env) for slot, arg in zip(self.slots, args)]
        if self.alias_pairs:
            self._check_aliasing(args, values)
        if not self.has_bound_sizes:
            return values
        return [values[item] if type(item) is int else item.value(env) for item in self.layout]

    def _check_aliasing(self, args: Sequence[object], addresses: list) -> None:
        """ArgumentError if an output's memory overlaps another buffer argument's."""
        sizes: dict[int, int] = {}
        for w, o in self.alias_pairs:
            if w > o and (o, w) in self.alias_pairs:
                continue  # two outputs: checked once
            for i in (w, o):
                if i not in sizes:
                    sizes[i] = _nbytes(args[i], self.slots[i])
            if not sizes[w] or not sizes[o]:
                continue
            a, b = addresses[w], addresses[o]
            if a < b + sizes[o] and b < a + sizes[w]:
                out, other = self.user_params[w].name, self.user_params[o].name
                same = "are the same array" if a == b and sizes[w] == sizes[o] else "overlap"
                raise ArgumentError(
                    f"{self.function}: output '{out}' and argument '{other}' {same}; the "
                    f"kernel would read '{other}' while writing '{out}' over it, so pass a "
                    f"separate output array (e.g. np.empty_like({other}))"
                )

    def _count_error(self, got: int) -> ArgumentError:
        names = ", ".join(p.name for p in self.user_params)
        message = f"{self.function}() takes {len(self.slots)} argument(s) ({names}), got {got}"
        bound = [p.name for p in self.params if p.bound_from_shape]
        if bound:
            verb = "is" if len(bound) == 1 else "are"
            message += f"; {', '.join(bound)} {verb} bound from the array shapes, not passed"
        return ArgumentError(message)


class _Slot:
    """Converts one user argument; `error` phrases a complaint about it."""

    __slots__ = ("function", "name")

    def __init__(self, function: str, name: str):
        self.function = function
        self.name = name

    def convert(self, arg: object, env: dict[str, Binding]) -> object:
        raise NotImplementedError

    def error(self, message: str) -> ArgumentError:
        return ArgumentError(f"{self.function}: argument '{self.name}' {message}")


class _Buffer(_Slot):
    """The device-independent part of a buffer check: dtype, rank, sizes, symbolic bindings."""

    __slots__ = ("dtype", "fixed_dims", "shape", "shape_text", "static_shape", "symbolic_dims")

    def __init__(self, function: str, param: Param):
        super().__init__(function, param.name)
        self.dtype = numpy_dtype(param.dtype)  # bfloat16: its uint16 bits
        self.shape = tuple(param.shape)
        self.shape_text = _shape_text(self.shape)
        self.fixed_dims = tuple(
            (axis, d) for axis, d in enumerate(self.shape) if isinstance(d, int)
        )
        self.symbolic_dims = tuple(
            (axis, d) for axis, d in enumerate(self.shape) if isinstance(d, str)
        )
        self.static_shape = self.shape if not self.symbolic_dims else None

    def check_layout(
        self, dtype: np.dtype, shape: tuple[int, ...], env: dict[str, Binding]
    ) -> None:
        if dtype is not self.dtype and dtype != self.dtype:
            raise self.error(
                f"expects dtype {self.dtype.name}, got {_dtype_text(dtype, self.dtype)}"
            )
        if shape == self.static_shape:
            return
        if len(shape) != len(self.shape):
            raise self.error(
                f"expects {len(self.shape)} dimension(s) {self.shape_text}, "
                f"got {len(shape)} with shape {_shape_text(shape)}"
            )
        for axis, want in self.fixed_dims:
            if shape[axis] != want:
                raise self.error(
                    f"expects shape {self.shape_text}, got {_shape_text(shape)}: "
                    f"dimension {axis} is {shape[axis]}, expected {want}"
                )
        for axis, symbol in self.symbolic_dims:
            got = shape[axis]
            bound = env.get(symbol)
            if bound is None:
                env[symbol] = (got, self.name, axis)
            elif bound[0] != got:
                raise self.error(
                    f"has shape {_shape_text(shape)} (expected {self.shape_text}), but "
                    f"{symbol} is {bound[0]} from {_origin(bound)} and {got} from "
                    f"'{self.name}' (dimension {axis})"
                )


class _CPUBuffer(_Buffer):
    """A buffer of a CPU kernel: NDArray, numpy array, or a CPU DLPack object -> address."""

    __slots__ = ()

    def convert(self, arg: object, env: dict[str, Binding]) -> int:
        arg_type = type(arg)
        if arg_type is NDArray:  # tensorforge's own CPU array (subclasses live elsewhere)
            array, pointer = arg._array, arg._data_ptr
        elif arg_type is np.ndarray:
            array, pointer = arg, None
        elif isinstance(arg, NDArray):
            if arg.device.kind != "cpu":
                raise self.error(
                    f"is on {arg.device} but '{self.function}' runs on the CPU; "
                    f"copy it to the host first (e.g. tf.nd.array(x.numpy()))"
                )
            array, pointer = arg._array, arg._data_ptr
        elif isinstance(arg, np.ndarray):
            array, pointer = arg, None
        else:
            array, pointer = self._import(arg), None
        self.check_layout(array.dtype, array.shape, env)
        flags = array.flags
        if not flags.carray:  # carray: C-contiguous, aligned and writeable; else say which is off
            raise self._layout_error(array, flags)
        if pointer is not None:
            return pointer
        if array.nbytes:  # NOTE: ~3x faster than array.ctypes.data; needs writeable + contiguous
            return ctypes.addressof(ctypes.c_char.from_buffer(array))
        return array.ctypes.data

    def _layout_error(self, array: np.ndarray, flags: object) -> ArgumentError:
        if not flags.c_contiguous:
            return self.error(
                f"is not C-contiguous (shape {_shape_text(array.shape)}, strides "
                f"{array.strides} bytes); pass np.ascontiguousarray({self.name})"
            )
        if not flags.writeable:
            return self.error(
                "is read-only; kernels write their outputs in place, so pass a writeable "
                f"array (e.g. {self.name}.copy())"
            )
        return self.error(
            f"is not aligned to its {array.dtype.itemsize}-byte elements; "
            f"pass a copy ({self.name}.copy())"
        )

    def _import(self, arg: object) -> np.ndarray:
        """A numpy view of a DLPack object on the CPU (shares memory), or an ArgumentError."""
        if hasattr(arg, "__dlpack__") and hasattr(arg, "__dlpack_device__"):
            device_type = arg.__dlpack_device__()[0]
            if device_type in (DLPACK_CPU, DLPACK_CUDA_HOST):
                try:
                    return np.from_dlpack(arg)
                except (BufferError, TypeError, RuntimeError, ValueError) as error:
                    raise self.error(f"could not be read through DLPack: {error}") from None
            where = (
                "a CUDA array" if device_type == DLPACK_CUDA else f"on DLPack device {device_type}"
            )
            raise self.error(
                f"is {where} but '{self.function}' runs on the CPU; copy it to the host first"
            )
        if getattr(arg, "__cuda_array_interface__", None) is not None:
            raise self.error(
                f"is a CUDA array but '{self.function}' runs on the CPU; copy it to the host first"
            )
        raise self.error(_not_an_array(arg))


class _CUDABuffer(_Buffer):
    """A buffer of a CUDA kernel: anything with `__cuda_array_interface__` (or CUDA DLPack)."""

    __slots__ = ()

    def convert(self, arg: object, env: dict[str, Binding]) -> int:
        if isinstance(arg, np.ndarray) or (isinstance(arg, NDArray) and arg.device.kind == "cpu"):
            raise self._host_error()
        interface = getattr(arg, "__cuda_array_interface__", None)
        if interface is None:
            if not hasattr(arg, "__dlpack_device__"):
                raise self.error(_not_an_array(arg))
            if arg.__dlpack_device__()[0] != DLPACK_CUDA:
                raise self._host_error()
            interface = from_dlpack(arg).__cuda_array_interface__
        shape = tuple(interface["shape"])
        dtype = np.dtype(interface["typestr"])
        pointer, read_only = interface["data"]
        self.check_layout(dtype, shape, env)
        strides = interface.get("strides")
        if strides is not None and not _is_c_contiguous(shape, tuple(strides), dtype.itemsize):
            raise self.error(
                f"is not C-contiguous (shape {_shape_text(shape)}, strides {tuple(strides)} "
                f"bytes); pass a contiguous copy (e.g. {self.name}.contiguous())"
            )
        if read_only:
            raise self.error("is read-only; kernels write their outputs in place")
        if pointer % dtype.itemsize:
            raise self.error(f"is not aligned to its {dtype.itemsize}-byte elements")
        return pointer

    def _host_error(self) -> ArgumentError:
        return self.error(
            f"is a host (CPU) array but '{self.function}' runs on a CUDA GPU; "
            f"copy it there first with tf.nd.array(x, tf.cuda(0))"
        )


class _Scalar(_Slot):
    """A scalar parameter: a Python (or numpy) number of the right kind, range-checked."""

    __slots__ = ("category", "dtype", "high", "in_shapes", "low")

    def __init__(self, function: str, param: Param, in_shapes: bool):
        super().__init__(function, param.name)
        self.dtype = param.dtype
        kind = np.dtype(param.dtype).kind
        self.category = {"f": "float", "b": "bool"}.get(kind, "int")
        if self.category == "int":
            info = np.iinfo(np.dtype(param.dtype))
            self.low, self.high = int(info.min), int(info.max)
        else:
            self.low, self.high = 0, 1
        self.in_shapes = in_shapes  # also a size in some buffer's shape: must agree with it

    def convert(self, arg: object, env: dict[str, Binding]) -> int | float:
        arg_type = type(arg)
        if self.category == "float":
            if arg_type is float:
                return arg
            if isinstance(arg, (int, float, np.integer, np.floating)):
                return float(arg)
            raise self.error(self._wanted(arg, "a number"))
        if arg_type is int or isinstance(arg, (int, np.integer, np.bool_)):
            value = int(arg)
        else:
            wanted = "an integer" if self.category == "int" else "a bool"
            raise self.error(self._wanted(arg, wanted))
        if not self.low <= value <= self.high:
            raise self.error(f"= {value} is out of range for {self.dtype}")
        if self.in_shapes:
            bound = env.get(self.name)
            if bound is None:
                env[self.name] = (value, self.name, None)
            elif bound[0] != value:
                raise self.error(f"is {value}, but {self.name} is {bound[0]} from {_origin(bound)}")
        return value

    def _wanted(self, arg: object, wanted: str) -> str:
        got = type(arg).__name__
        if isinstance(arg, np.ndarray):
            got = f"numpy.ndarray of shape {_shape_text(arg.shape)}"
            if arg.ndim == 0:
                got += " (use .item() for a 0-d array)"
        elif isinstance(arg, NDArray) or hasattr(arg, "__dlpack__"):
            got = f"an array ({got})"
        elif isinstance(arg, (float, np.floating)):
            got = f"float {arg!r}"
        return f"is a {self.dtype} scalar and expects {wanted}, got {got}"


class _BoundSize:
    """A symbolic size the user does not pass: its value comes from a buffer's shape."""

    __slots__ = ("dtype", "function", "high", "name")

    def __init__(self, function: str, param: Param):
        self.function = function
        self.name = param.name
        self.dtype = param.dtype
        self.high = int(np.iinfo(np.dtype(param.dtype)).max)

    def value(self, env: dict[str, Binding]) -> int:
        value = env[self.name][0]
        if value > self.high:
            raise ArgumentError(
                f"{self.function}: size '{self.name}' = {value} (from {_origin(env[self.name])}) "
                f"does not fit its dtype {self.dtype}"
            )
        return value


def _origin(binding: Binding) -> str:
    _, name, axis = binding
    return f"'{name}'" if axis is None else f"'{name}' (dimension {axis})"


def _shape_text(shape: Sequence[int | str]) -> str:
    inner = ", ".join(str(d) for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _dtype_text(got: np.dtype, expected: np.dtype) -> str:
    if got.name == expected.name:  # same type, other byte order
        return f"{got.name} in non-native byte order ({got.str})"
    return got.name


def _not_an_array(arg: object) -> str:
    message = (
        "expects an array (tf.nd.NDArray, numpy.ndarray, or an object with __dlpack__ / "
        f"__cuda_array_interface__), got {type(arg).__name__}"
    )
    if isinstance(arg, (list, tuple)):
        message += "; convert it with np.asarray(..., dtype=...)"
    return message


def _nbytes(arg: object, slot: _Slot) -> int:
    """Bytes a buffer argument spans (its shape was already checked, so it is a dense array)."""
    shape = getattr(arg, "shape", None)
    if shape is None:
        interface = getattr(arg, "__cuda_array_interface__", None)
        shape = interface["shape"] if interface else ()
    count = 1
    for d in shape:
        count *= int(d)
    return count * getattr(slot, "dtype", np.dtype("uint8")).itemsize


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    expected = itemsize
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 0:
            return True
        if size != 1 and stride != expected:  # a size-1 dimension's stride never matters
            return False
        expected *= size
    return True
