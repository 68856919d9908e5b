"""Module: the compiled functions `tf.build` returns; call them, time them, read their source.

The runtime sees compiled kernels only: a `KernelSource` (text and calling metadata) next to an
executable, an object with `call(raw_args)` taking buffers as integer addresses (device pointers
on a GPU) and scalars as Python numbers, in `source.params` order. Executables may also offer
`get_source(fmt)` and, on a GPU, `synchronize()` (wait for queued work), which timing uses.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tensorforge.errors import ArgumentError, BuildError, DeviceError
from tensorforge.runtime import disk_cache, packed_func
from tensorforge.runtime.arguments import Signature
from tensorforge.runtime.cache import get_or_compile
from tensorforge.runtime.device import Device
from tensorforge.runtime.registry import RUNTIMES, runtime_for
from tensorforge.runtime.timing import BenchmarkResult, check_timing_options, measure
from tensorforge.target import Target, as_target

if TYPE_CHECKING:
    from tensorforge.codegen.base import KernelSource, Param


class Function:
    """One compiled entry point: `f(*args)` checks and converts the arguments, then runs it."""

    def __init__(self, source: KernelSource, executable: object):
        self.name = source.entry
        self.source = source
        self.executable = executable
        self.device = Device(runtime_for(source.target).device, 0)
        self.signature = Signature(source.entry, source.params, self.device.kind)
        self.unavailable_reason: str | None = getattr(executable, "unavailable_reason", None)
        self._call = executable.call

    @property
    def params(self) -> tuple[Param, ...]:
        """All kernel parameters in calling order, `bound_from_shape` sizes included."""
        return self.source.params

    @property
    def arg_names(self) -> tuple[str, ...]:
        """The names of the arguments a caller passes, in order."""
        return tuple(p.name for p in self.signature.user_params)

    def __call__(self, *args: object) -> None:
        if self.unavailable_reason is not None:
            raise DeviceError(self.unavailable_reason)
        self._call(self.signature.convert(args))
        if packed_func._errors:  # a packed function the kernel called raised
            packed_func.raise_pending()

    def __repr__(self) -> str:
        return f"<tf.runtime.Function {self.name}({', '.join(self.arg_names)}) on {self.device}>"


class Module:
    """Compiled functions of one target kind; `mod(*args)` calls the entry, `mod[name]` any.

    Build one with `Module.from_sources(sources, target)` (compiling through the executable
    cache) or `Module([(source, executable), ...])` from executables already made.
    """

    def __init__(
        self,
        kernels: Iterable[tuple[KernelSource, object]],
        target: Target | str | None = None,
        entry: str | None = None,
    ):
        self._functions: dict[str, Function] = {}
        for source, executable in kernels:
            if source.entry in self._functions:
                raise BuildError(f"Module: two functions are named '{source.entry}'")
            self._functions[source.entry] = Function(source, executable)
        if not self._functions:
            raise BuildError("Module: needs at least one compiled function")
        kinds = sorted({f.source.target for f in self._functions.values()})
        if len(kinds) != 1 or kinds[0] not in RUNTIMES:
            raise BuildError(
                f"Module: functions must share one target kind of "
                f"{', '.join(RUNTIMES)}; got {', '.join(kinds)}"
            )
        self.type_key: str = kinds[0]
        first = next(iter(self._functions.values()))
        self.target = (
            target if target is not None else (first.source.target_string or self.type_key)
        )
        self.entry_name = entry if entry is not None else first.name
        self._entry = self[self.entry_name]

    @classmethod
    def from_sources(
        cls,
        sources: Iterable[KernelSource],
        target: Target | str | None = None,
        entry: str | None = None,
    ) -> Module:
        """Compile (or fetch from the in-memory cache) each source for `target`: what build calls.

        A CUDA module made where no GPU is usable still builds; its source is readable and
        calling it raises DeviceError.
        """
        target = as_target(target)
        kernels = []
        for source in sources:
            if source.target != target.kind:
                raise BuildError(
                    f"Module: '{source.entry}' was generated for {source.target}, "
                    f"not for the target {target}"
                )
            kernels.append((source, load_executable(source, target)))
        return cls(kernels, target, entry)

    # -- functions ----------------------------------------------------------------------------
    def __call__(self, *args: object) -> None:
        self._entry(*args)

    def __getitem__(self, name: str) -> Function:
        try:
            return self._functions[name]
        except (KeyError, TypeError):
            names = ", ".join(self._functions)
            raise ArgumentError(f"Module has no function {name!r}; it has: {names}") from None

    def get_function(self, name: str) -> Function:
        """TVM's spelling of `mod[name]`."""
        return self[name]

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(self._functions)

    @property
    def params(self) -> tuple[Param, ...]:
        """The entry's parameters in calling order (see `Function.params`)."""
        return self._entry.params

    @property
    def sources(self) -> tuple[KernelSource, ...]:
        return tuple(f.source for f in self._functions.values())

    @property
    def device(self) -> Device:
        """The device the functions run on: cpu(0), or cuda(0) (the runtime entry's kind)."""
        return self._entry.device

    @property
    def imported_modules(self) -> list[Module]:
        """TVM tutorials read CUDA C as `mod.imported_modules[0].get_source()`; that works here."""
        return [self] if self.device.kind != "cpu" else []

    # -- inspection and timing ----------------------------------------------------------------
    def get_source(self, fmt: str = "") -> str:
        """The source in `fmt`: "ll" or "asm" for llvm, "cuda" or "ptx" for cuda (the runtime
        entry's `source_formats`); "" = the first, the kernel's own text."""
        formats = runtime_for(self.type_key).source_formats
        fmt = fmt or formats[0]
        if fmt not in formats:
            valid = ", ".join(repr(f) for f in formats)
            raise ArgumentError(
                f"get_source: unknown format {fmt!r} for a {self.type_key} module; "
                f"valid formats: {valid}"
            )
        return "\n".join(_source_text(f, fmt, formats[0]) for f in self._functions.values())

    def time_evaluator(
        self,
        func_name: str,
        dev: Device,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: float = 0,
        limit_zero_time_iterations: int = 100,
        cooldown_interval_ms: float = 0,
        repeats_to_cooldown: int = 1,
    ) -> TimeEvaluator:
        """A callable that times `func_name` on its arguments as TVM does (see timing.measure)."""
        function = self[func_name] if func_name else self._entry
        if not isinstance(dev, Device):
            raise ArgumentError(
                f"time_evaluator: dev must be a Device such as tf.cpu(0), got {dev!r}"
            )
        if dev.kind != function.device.kind:
            raise ArgumentError(
                f"time_evaluator: '{function.name}' runs on {function.device}, not on {dev}"
            )
        options = {
            "number": number,
            "repeat": repeat,
            "min_repeat_ms": min_repeat_ms,
            "limit_zero_time_iterations": limit_zero_time_iterations,
            "cooldown_interval_ms": cooldown_interval_ms,
            "repeats_to_cooldown": repeats_to_cooldown,
        }
        check_timing_options(**options)
        return TimeEvaluator(function, options)

    def export_library(self, file_name: str | os.PathLike) -> None:
        """Save every function to the one file `file_name`; `tf.runtime.load_module` reads it
        back in another process without compiling (see runtime/export.py)."""
        from tensorforge.runtime.export import export_library  # NOTE: export imports this module

        export_library(self, file_name)

    def save(self, file_name: str | os.PathLike, fmt: str = "") -> None:
        """Write the code to `file_name` in `fmt` (default: its suffix); see runtime/save.py."""
        from tensorforge.runtime.save import save

        save(self, file_name, fmt)

    def __repr__(self) -> str:
        return f"Module({self.type_key}: {', '.join(self._functions)})"


class TimeEvaluator:
    """`evaluator(*args)` -> BenchmarkResult. Arguments are checked once, outside the timing."""

    def __init__(self, function: Function, options: dict):
        self.function = function
        self.options = options

    def __call__(self, *args: object) -> BenchmarkResult:
        function = self.function
        if function.unavailable_reason is not None:
            raise DeviceError(function.unavailable_reason)
        call = functools.partial(function.executable.call, function.signature.convert(args))
        synchronize = getattr(function.executable, "synchronize", None)
        with disk_cache.suspended():  # NOTE: a disk-cache entry being written shares the CPUs
            return measure(call, synchronize, **self.options)


class UnavailableExecutable:
    """Stands in for a kernel that cannot run here (a CUDA build on a machine without a GPU).

    `inner` is the backend's executable where it could be made anyway (it may still show PTX).
    """

    def __init__(self, source: KernelSource, reason: str, inner: object | None = None):
        self.source = source
        self.unavailable_reason = reason
        self.inner = inner

    def call(self, raw_args: list) -> None:
        raise DeviceError(self.unavailable_reason)

    def get_source(self, fmt: str) -> str:
        if hasattr(self.inner, "get_source"):
            return self.inner.get_source(fmt)
        if fmt == runtime_for(self.source.target).source_formats[0]:
            return self.source.text
        raise DeviceError(f"get_source({fmt!r}): {self.unavailable_reason}")


def load_executable(source: KernelSource, target: Target) -> object:
    """The executable for `source`, from the in-memory cache or compiled now."""
    if not Device(runtime_for(source.target).device, 0).exist:
        try:
            inner = get_or_compile(source, target, executable_class(source.target))
        except (ImportError, DeviceError):
            inner = None
        return UnavailableExecutable(source, no_device_reason(source), inner)
    return get_or_compile(source, target, executable_class(source.target))


def no_device_reason(source: KernelSource) -> str:
    """What calling `source`'s kernel says where its device (a GPU) is not usable here."""
    runtime = runtime_for(source.target)
    device = runtime.device.upper()
    return (
        f"cannot run '{source.entry}': no {device} device is available here (pycuda is not "
        f"installed or finds no GPU); mod.get_source({runtime.source_formats[0]!r}) still shows "
        f"the source"
    )


def executable_class(kind: str) -> type:
    """The class that turns a KernelSource of target `kind` into something callable."""
    # NOTE: imported on use: llvmlite's JIT or pycuda load only when a kernel needs them.
    return runtime_for(kind).executable_class()


def _source_text(function: Function, fmt: str, own_format: str) -> str:
    get_source = getattr(function.executable, "get_source", None)
    if get_source is not None:
        return get_source(fmt)
    if fmt == own_format:
        return function.source.text
    raise ArgumentError(f"get_source: '{function.name}' cannot show {fmt!r}")
