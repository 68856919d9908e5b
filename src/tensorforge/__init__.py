"""tensorforge: a tensor-expression compiler. Declare with `te`, schedule, `lower`, `build`, run."""

__version__ = "0.1.0"

from tensorforge import te  # noqa: E402
from tensorforge.build import build, lower  # noqa: E402
from tensorforge.errors import (  # noqa: E402
    ArgumentError,
    BuildError,
    DeviceError,
    ExprError,
    LoweringError,
    ScheduleError,
    TargetError,
    TensorForgeError,
)
from tensorforge.target import Target  # noqa: E402


def __getattr__(name: str):
    # runtime pieces load on first use so `import tensorforge` stays quick
    if name in ("cpu", "cuda", "device", "Device"):
        from tensorforge.runtime import device as _device

        return getattr(_device, name)
    if name == "nd":
        from tensorforge import nd

        return nd
    if name == "runtime":
        import tensorforge.runtime as runtime

        return runtime
    if name in ("schedule", "tune", "ops", "ir", "codegen"):
        import importlib

        return importlib.import_module(f"tensorforge.{name}")
    raise AttributeError(f"module 'tensorforge' has no attribute {name!r}")


__all__ = [
    "te",
    "lower",
    "build",
    "Target",
    "cpu",
    "cuda",
    "device",
    "nd",
    "TensorForgeError",
    "ScheduleError",
    "ArgumentError",
    "BuildError",
    "LoweringError",
    "ExprError",
    "TargetError",
    "DeviceError",
]
