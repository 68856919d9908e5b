"""tensorforge: a tensor-expression compiler. Declare with `te`, schedule, `lower`, `build`, run."""

__version__ = "0.1.0"

from tensorforge import te  # noqa: E402
from tensorforge.build import build, lower  # noqa: E402
from tensorforge.errors import (  # noqa: E402
    AllocationError,
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
        import importlib

        return getattr(importlib.import_module("tensorforge.runtime.device"), name)
    if name in ("nd", "runtime", "schedule", "tune", "ops", "ir", "codegen", "testing", "tir"):
        import importlib

        return importlib.import_module(f"tensorforge.{name}")
    if name in ("register_func", "get_global_func", "list_global_func_names"):
        import importlib

        return getattr(importlib.import_module("tensorforge.runtime.packed_func"), name)
    from tensorforge.tvm_names import TOP_LEVEL, missing

    raise missing("tensorforge", name, TOP_LEVEL, [*globals(), *__all__])


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
    "AllocationError",
    "register_func",
    "get_global_func",
    "tir",
    "testing",
]
