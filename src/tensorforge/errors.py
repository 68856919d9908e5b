"""The exception hierarchy: every error tensorforge raises derives from TensorForgeError."""


class TensorForgeError(Exception):
    """Base of all tensorforge errors."""


class ExprError(TensorForgeError, TypeError):
    """A tensor expression was built or used wrongly (bad dtype mix, truth value of an Expr...)."""


class ScheduleError(TensorForgeError, ValueError):
    """A schedule primitive was misused; the message names the stage and axis."""


class LoweringError(TensorForgeError):
    """Lowering produced (or was asked to produce) invalid loop IR."""


class BuildError(TensorForgeError):
    """Code generation or compilation failed."""


class ArgumentError(TensorForgeError, ValueError):
    """A compiled function was called with wrong arguments; the message names the parameter."""


class TargetError(TensorForgeError, ValueError):
    """A target string could not be understood or is not available here."""


class DeviceError(TensorForgeError, RuntimeError):
    """A device (e.g. a CUDA GPU) is not available or failed."""


class AllocationError(TensorForgeError, MemoryError):
    """A compiled function could not allocate an intermediate buffer (the allocator, or the GPU,
    refused the size); the message names the function, the buffer and the bytes asked for."""
