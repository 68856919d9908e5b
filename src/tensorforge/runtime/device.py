"""Devices: where arrays live and kernels run (`tf.cpu(0)`, `tf.cuda(0)`, `tf.device("cuda", 0)`)."""

from __future__ import annotations

import functools

from tensorforge.errors import ArgumentError, DeviceError
from tensorforge.target import KINDS

# Spellings TVM users write for each kind: a target kind names its device (`tvm.device("llvm")`
# is the CPU), and "gpu" and "nvidia" mean CUDA.
_KIND_ALIASES = {
    **{kind: facts.device for kind, facts in KINDS.items()},
    "cpu": "cpu",
    "cuda": "cuda",
    "gpu": "cuda",
    "nvidia": "cuda",
}
# DLPack device type codes (kDLCPU, kDLCUDA); TVM's Device.device_type uses the same numbers.
DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_HOST = 3
_DLPACK_TYPE = {"cpu": DLPACK_CPU, "cuda": DLPACK_CUDA}


class Device:
    """A device: `kind` is "cpu" or "cuda", `index` which one of that kind.

    Devices compare equal by (kind, index) and hash accordingly. `exist` says whether the device
    is usable here; for CUDA that asks pycuda, imported only then (tensorforge imports without it).
    """

    __slots__ = ("index", "kind")

    def __init__(self, kind: str, index: int = 0):
        normalized = _KIND_ALIASES.get(kind.lower()) if isinstance(kind, str) else None
        if normalized is None:
            raise ArgumentError(f"device: unknown device kind {kind!r}; expected 'cpu' or 'cuda'")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ArgumentError(f"device: index must be a non-negative int, got {index!r}")
        self.kind = normalized
        self.index = index

    @property
    def device_type(self) -> int:
        """The DLPack device type code (1 for the CPU, 2 for CUDA), as TVM's `device_type`."""
        return _DLPACK_TYPE[self.kind]

    @property
    def device_id(self) -> int:
        """TVM's name for `index`."""
        return self.index

    @property
    def exist(self) -> bool:
        """Whether this device is present and usable (for CUDA: pycuda imports and the GPU exists)."""
        if self.kind == "cpu":
            return True
        return self.index < cuda_device_count()

    def sync(self) -> None:
        """Wait until all work queued on this device has finished (a no-op on the CPU)."""
        if self.kind == "cpu":
            return
        from tensorforge.runtime.ndarray import cuda_backend

        cuda_backend(self).synchronize(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __repr__(self) -> str:
        return f"{self.kind}({self.index})"


def cpu(index: int = 0) -> Device:
    """The host CPU."""
    return Device("cpu", index)


def cuda(index: int = 0) -> Device:
    """An NVIDIA GPU."""
    return Device("cuda", index)


def device(kind: str, index: int = 0) -> Device:
    """A device by name: `device("cuda", 0)`, `device("cpu")`; also TVM's "llvm" and "gpu"."""
    return Device(kind, index)


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """How many CUDA devices pycuda sees; 0 where pycuda or a GPU is missing. Asked once."""
    try:
        from pycuda import driver  # NOTE: lazy, so tensorforge imports without pycuda

        driver.init()
        return driver.Device.count()
    except Exception:  # noqa: BLE001 - ImportError, or pycuda's errors without a driver/GPU
        return 0


def require_cuda(dev: Device, what: str) -> None:
    """Raise DeviceError (saying why) unless `dev` is a usable CUDA device."""
    if dev.exist:
        return
    count = cuda_device_count()
    if count == 0:
        why = "no CUDA device is available here (pycuda is not installed or finds no GPU)"
    else:
        why = f"{dev} does not exist (this machine has {count} CUDA device(s))"
    raise DeviceError(f"{what}: {why}")
