"""AutoTVM's measurement spellings (API.md §7): LocalBuilder, LocalRunner, and how
measure_option reads them (`builder="local"` included)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tensorforge.tune.template import TuneError


@dataclass(frozen=True)
class LocalBuilder:
    """Build candidates in local worker processes (`n_parallel` at once; default: one per core),
    each within `timeout` seconds. Only the default build function exists here."""

    timeout: float = 10
    n_parallel: int | None = None
    build_kwargs: dict | None = None
    build_func: str = "default"
    do_fork: bool = True
    runtime: Any = None

    def __post_init__(self) -> None:
        if self.build_func != "default":
            raise TuneError(
                f"LocalBuilder: build_func={self.build_func!r} is not provided; candidates are "
                f"built with tf.build for the task's target (build_func='default')"
            )


@dataclass(frozen=True)
class LocalRunner:
    """Time candidates on this machine, one at a time: `repeat` measurements of `number` calls
    each (more calls where `min_repeat_ms` asks), each candidate within `timeout` seconds.
    The positional order is TVM's: LocalRunner(timeout, number, repeat, min_repeat_ms)."""

    timeout: float = 10
    number: int = 4
    repeat: int = 3
    min_repeat_ms: float = 0
    cooldown_interval: float = 0.1
    enable_cpu_cache_flush: bool = False
    module_loader: Any = None

    def __post_init__(self) -> None:
        if self.module_loader is not None:
            raise TuneError("LocalRunner: module_loader is not provided (there is no RPC)")


def resolve_builder(builder: Any) -> tuple[Any, dict]:
    """(custom build function or None for the default, measure options it sets)."""
    if builder is None:
        return None, {}
    if isinstance(builder, str):
        if builder != "local":
            raise TuneError(
                f"measure_option: builder={builder!r} is not known; use 'local', "
                f"tune.LocalBuilder(...), or a function (task, config, feature_fn) -> (module, features)"
            )
        return None, {}
    if isinstance(builder, LocalBuilder):
        options: dict = {"timeout": builder.timeout}
        if builder.n_parallel is not None:
            options["n_parallel"] = builder.n_parallel
        return None, options
    if callable(builder):
        return builder, {}
    raise TuneError(
        f"measure_option: builder must be 'local', a tune.LocalBuilder or a function, got {builder!r}"
    )


def resolve_runner(runner: Any) -> tuple[Any, dict]:
    """(custom run function or None for the default, measure options it sets)."""
    if runner is None:
        return None, {}
    if isinstance(runner, str):
        if runner != "local":
            raise TuneError(
                f"measure_option: runner={runner!r} is not known; use 'local', "
                f"tune.LocalRunner(...), or a function (task, module, option, reference) -> seconds"
            )
        return None, {}
    if isinstance(runner, LocalRunner):
        return None, {
            "number": runner.number,
            "repeat": runner.repeat,
            "min_repeat_ms": runner.min_repeat_ms,
            "timeout": runner.timeout,
        }
    if callable(runner):
        return runner, {}
    raise TuneError(
        f"measure_option: runner must be 'local', a tune.LocalRunner or a function, got {runner!r}"
    )
