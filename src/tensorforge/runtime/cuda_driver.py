"""pycuda, imported lazily: the driver module and each GPU's primary context, made current on demand.

The primary context is the one the CUDA runtime (and so torch, cupy, triton) uses, so device
pointers pass freely between tensorforge and those libraries. Only this module and the other
`runtime/cuda_*.py` files import pycuda; without it (or without a GPU) every entry point raises
`DeviceError("no CUDA device is available: ...")`.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from types import ModuleType

from tensorforge.errors import DeviceError

_lock = threading.Lock()
_driver: ModuleType | None = None
_primary: dict[int, object] = {}  # device index -> retained primary context
_local = threading.local()  # .current: the device index whose context this thread pushed


def driver() -> ModuleType:
    """`pycuda.driver`, initialized; DeviceError saying why where there is no usable GPU."""
    global _driver
    if _driver is not None:
        return _driver
    try:
        import pycuda.driver as cuda
    except Exception as error:  # ImportError, or OSError when libcuda.so is missing
        raise DeviceError(
            f"no CUDA device is available: pycuda cannot be imported ({error}); "
            f"install pycuda on a machine with an NVIDIA GPU and driver"
        ) from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except Exception as error:
        raise DeviceError(
            f"no CUDA device is available: the CUDA driver failed ({error})"
        ) from None
    if count == 0:
        raise DeviceError("no CUDA device is available: the CUDA driver finds no GPU")
    _driver = cuda
    return cuda


def available() -> bool:
    try:
        driver()
        return True
    except DeviceError:
        return False


def activate(device_id: int = 0) -> object:
    """Make GPU `device_id`'s primary context current in this thread (cheap when it already is)."""
    if getattr(_local, "current", None) == device_id:
        return _primary[device_id]
    cuda = driver()
    with _lock:
        context = _primary.get(device_id)
        if context is None:
            count = cuda.Device.count()
            if not 0 <= device_id < count:
                raise DeviceError(
                    f"cuda({device_id}) does not exist: this machine has {count} GPU(s)"
                )
            context = cuda.Device(device_id).retain_primary_context()
            _primary[device_id] = context
    if getattr(_local, "current", None) is not None:
        cuda.Context.pop()  # the context this thread pushed for another GPU
    context.push()
    _local.current = device_id
    if threading.current_thread() is threading.main_thread() and not getattr(
        _local, "atexit", False
    ):
        _local.atexit = True
        atexit.register(_pop_at_exit)
    return context


@contextlib.contextmanager
def thread_scope(device_id: int = 0):
    """GPU `device_id`'s context current for the body, on a thread other than the main one:
    pushed, then popped again (autograd runs a CUDA backward on a thread of its own; a
    context left pushed there made PyCUDA abort the process at exit, "the context stack was
    not empty upon module cleanup"). On the main thread, `activate` (its pop is at exit)."""
    if threading.current_thread() is threading.main_thread():
        activate(device_id)
        yield
        return
    before = getattr(_local, "current", None)
    if before == device_id:
        yield
        return
    activate(device_id)
    try:
        yield
    finally:
        driver().Context.pop()
        _local.current = None
        if before is not None:
            activate(before)


def _pop_at_exit() -> None:
    if getattr(_local, "current", None) is not None:
        try:
            driver().Context.pop()
        except Exception:  # NOTE: at interpreter exit there is nobody left to report to
            pass
        _local.current = None


def synchronize(device_id: int = 0) -> None:
    """Wait for all work queued on GPU `device_id`; a failed kernel surfaces here as DeviceError."""
    cuda = driver()
    activate(device_id)
    try:
        cuda.Context.synchronize()
    except cuda.Error as error:
        raise DeviceError(f"CUDA error on cuda({device_id}): {error}") from None
