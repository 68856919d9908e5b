"""Packed functions: Python callables that generated code calls by name (`tf.tir.call_packed`).

`@tf.register_func("name")` registers one. A kernel calls the one C entry point PACKED_SYMBOL
as `int32 __tf_call_packed(char *signature, int64 *slots)`: the signature string is
"name;kind;kind;..." with one kind per argument ("B<dtype>:<ndim>" a buffer, "I" an integer,
"F" a float) and `slots` holds, per argument, a buffer's address followed by its ndim extents,
or an integer, or a double's bits. The Python side wraps each buffer as an NDArray sharing the
kernel's memory and calls the function. An exception is kept and raised when the kernel
returns (the kernel's remaining work still runs, on whatever the function left).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from tensorforge.errors import ArgumentError, TensorForgeError

PACKED_SYMBOL = "__tf_call_packed"
_REGISTRY: dict[str, Callable[..., Any]] = {}
_errors: list[BaseException] = []  # raised by packed functions (any thread) since the last check
_errors_lock = threading.Lock()
_SIGNATURE_CACHE: dict[int, tuple[str, tuple[tuple[str, str, int], ...]]] = {}


class PackedFuncError(TensorForgeError, RuntimeError):
    """A packed function called from a kernel raised (the original is the __cause__)."""


def register_func(
    name: Any = None, f: Callable[..., Any] | None = None, override: bool = False
) -> Any:
    """Register `f` under `name` for tf.tir.call_packed: `@tf.register_func("my.add")`,
    `@tf.register_func` (the function's own name) or `tf.register_func("my.add", f)`."""
    if callable(name) and f is None:  # @register_func without arguments
        return register_func(name.__name__, name, override)
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"register_func: the name must be a non-empty string, got {name!r}")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise ArgumentError(f"register_func({name!r}): {func!r} is not callable")
        if name in _REGISTRY and not override and _REGISTRY[name] is not func:
            raise ArgumentError(
                f"register_func: {name!r} is already registered; pass override=True to replace it"
            )
        _REGISTRY[name] = func
        return func

    return register(f) if f is not None else register


def get_global_func(name: str, allow_missing: bool = False) -> Callable[..., Any] | None:
    """The function registered as `name` (None if missing and `allow_missing`)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if allow_missing:
        return None
    raise ArgumentError(f"get_global_func: no function is registered as {name!r}")


def list_global_func_names() -> list[str]:
    return sorted(_REGISTRY)


# -- the C entry point ---------------------------------------------------------------------------
_CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


def _parse(address: int) -> tuple[str, tuple[tuple[str, str, int], ...]]:
    cached = _SIGNATURE_CACHE.get(address)
    if cached is None:
        text = ctypes.string_at(address).decode()
        name, *kinds = text.split(";")
        parsed = []
        for kind in kinds:
            if kind.startswith("B"):
                dtype, ndim = kind[1:].split(":")
                parsed.append(("B", dtype, int(ndim)))
            else:
                parsed.append((kind, "", 0))
        cached = _SIGNATURE_CACHE[address] = (name, tuple(parsed))
    return cached


def _arguments(kinds: tuple[tuple[str, str, int], ...], slots_address: int) -> list[Any]:
    from tensorforge.runtime.ndarray import NDArray

    count = sum(1 + ndim for _, _, ndim in kinds)
    slots = (ctypes.c_int64 * count).from_address(slots_address)
    args: list[Any] = []
    at = 0
    for kind, dtype, ndim in kinds:
        if kind == "B":
            pointer = slots[at] & 0xFFFFFFFFFFFFFFFF
            shape = tuple(int(slots[at + 1 + d]) for d in range(ndim))
            at += 1 + ndim
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            raw = (ctypes.c_char * max(nbytes, 1)).from_address(pointer)
            array = np.frombuffer(raw, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
            args.append(NDArray(array))
        elif kind == "F":
            args.append(float(np.int64(slots[at]).view(np.float64)))
            at += 1
        else:
            args.append(int(slots[at]))
            at += 1
    return args


def _call_packed(signature: int, slots: int) -> int:
    try:
        name, kinds = _parse(signature)
        func = _REGISTRY.get(name)
        if func is None:
            raise PackedFuncError(
                f"call_packed: no function is registered as {name!r}; register one with "
                f"@tf.register_func({name!r})"
            )
        result = func(*_arguments(kinds, slots))
        return int(result) if isinstance(result, (int, np.integer)) else 0
    except BaseException as err:  # noqa: BLE001 - raised again when the kernel returns
        with _errors_lock:
            _errors.append(err)
        return -1


_CALLBACK = _CALLBACK_TYPE(_call_packed)  # kept alive for the life of the process


def callback_address() -> int:
    """The address generated code reaches PACKED_SYMBOL at."""
    return ctypes.cast(_CALLBACK, ctypes.c_void_p).value


def raise_pending() -> None:
    """Raise what a packed function raised during the kernel that just returned, if anything."""
    if not _errors:
        return
    with _errors_lock:
        error = _errors[0]
        _errors.clear()
    if isinstance(error, PackedFuncError):
        raise error
    raise PackedFuncError(f"a packed function raised {type(error).__name__}: {error}") from error
