"""Templates and tasks: `@tune.template`, `tune.get_config()`, `tune.create_task`.

A template is a function from workload arguments to `(schedule, tensors)` that reads its knobs
from `tune.get_config()`. Which config that is depends on where the template runs:

- inside `Task.instantiate(config)` (a tuner measuring a candidate): that config;
- defining a task's space (`create_task`): a fresh `ConfigSpace`, every knob at its first choice;
- called directly inside `apply_history_best(...)`: the best logged config for the workload
  (or the default, with a warning, when the log has none for it);
- called directly anywhere else: the default config (every knob at its first choice).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tensorforge.errors import TensorForgeError
from tensorforge.tune.space import ConfigEntity, ConfigSpace


class TuneError(TensorForgeError):
    """Tuning was set up wrongly (unknown template, bad arguments, missing dependency...)."""


_TEMPLATES: dict[str, Template] = {}
_local = threading.local()
_dispatch_stack: list[DispatchContext] = []


def _config_stack() -> list[Any]:
    stack = getattr(_local, "configs", None)
    if stack is None:
        stack = _local.configs = []
    return stack


@contextlib.contextmanager
def using_config(config: ConfigSpace | ConfigEntity) -> Iterator[Any]:
    """Make `config` what `get_config()` returns in this thread for the duration."""
    stack = _config_stack()
    stack.append(config)
    try:
        yield config
    finally:
        stack.pop()


def get_config() -> ConfigSpace | ConfigEntity:
    """The config the running template should read its knobs from (see the module docstring)."""
    stack = _config_stack()
    if stack:
        return stack[-1]
    return ConfigSpace()  # outside any template run: a throwaway default config


# -- dispatch (apply_history_best plugs in here) ------------------------------------------------


class DispatchContext:
    """Chooses configs for templates called directly (outside a tuner). Subclassed by records."""

    def query(self, key: WorkloadKey, space: ConfigSpace) -> ConfigEntity | None:
        raise NotImplementedError

    def __enter__(self) -> DispatchContext:
        _dispatch_stack.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _dispatch_stack.remove(self)


@dataclass(frozen=True)
class WorkloadKey:
    """What a tuning record is keyed by: it applies only where all four agree."""

    template: str
    args: str  # the arguments as canonical JSON
    workload_hash: str
    target: str


# -- templates ------------------------------------------------------------------------------------


class Template:
    """A registered template; calling it runs the function under the config dispatch rules."""

    def __init__(self, name: str, func: Callable[..., Any]):
        self.name = name
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any) -> Any:
        if _config_stack():  # under a tuner (or nested in another template): use that config
            return self.func(*args)
        if _dispatch_stack:
            return self._dispatch(_dispatch_stack[-1], args)
        with using_config(ConfigSpace()):
            return self.func(*args)

    def define(self, args: Sequence[Any]) -> tuple[ConfigSpace, Any]:
        """Run the template once to define its space; returns (space, what it returned)."""
        space = ConfigSpace()
        with using_config(space):
            result = self.func(*args)
        return space, result

    def _dispatch(self, context: DispatchContext, args: tuple) -> Any:
        from tensorforge.target import Target

        target = Target.current() or Target("llvm")
        space, result = self.define(args)
        key = WorkloadKey(
            self.name,
            canonical_args(args),
            workload_hash(_tensors_of(result, self.name)),
            str(target),
        )
        config = context.query(key, space)
        if config is None:
            return result  # the default config's schedule (the context has warned)
        with using_config(config):
            return self.func(*args)

    def __repr__(self) -> str:
        return f"Template({self.name!r})"

    def __reduce__(self) -> Any:
        # Pickled by name: the receiving process finds it in its registry (importing the
        # defining module if it has not yet).
        return (_template_by_name, (self.name, getattr(self.func, "__module__", None)))


def _template_by_name(name: str, module: str | None) -> Template:
    if name not in _TEMPLATES and module:
        import importlib
        import sys

        if module == "__main__" and "__mp_main__" in sys.modules:
            pass  # the main script, already run under multiprocessing's name
        else:
            try:
                importlib.import_module(module)
            except ImportError:
                pass
    return get_template(name)


def template(name: str) -> Callable[[Callable[..., Any]], Template]:
    """Register a tunable template under `name`: `@tune.template("example/matmul")`.

    Registering a name again replaces the earlier template (re-running a script or a notebook cell).
    """
    if not isinstance(name, str) or not name:
        raise TuneError(f"tune.template: the name must be a non-empty string, got {name!r}")

    def register(func: Callable[..., Any]) -> Template:
        tmpl = Template(name, func)
        _TEMPLATES[name] = tmpl
        return tmpl

    return register


def get_template(name: str | Template) -> Template:
    if isinstance(name, Template):
        return name
    if name not in _TEMPLATES:
        from tensorforge.tune.builtin import register_builtins

        register_builtins()

        if f"builtin/{name}" in _TEMPLATES:  # "matmul" names the built-in "builtin/matmul"
            name = f"builtin/{name}"
    try:
        return _TEMPLATES[name]
    except KeyError:
        known = ", ".join(sorted(_TEMPLATES)) or "none"
        raise TuneError(f"no template named {name!r} (registered: {known})") from None


# -- workloads ------------------------------------------------------------------------------------


def canonical_args(args: Sequence[Any]) -> str:
    """The template arguments as canonical JSON (tuples become lists); raises if not JSON data."""
    try:
        return json.dumps(list(args), sort_keys=True, separators=(",", ":"))
    except TypeError as e:
        raise TuneError(
            f"template arguments must be JSON data (numbers, strings, lists), got {args!r}: {e}"
        ) from None


def _tensors_of(result: Any, name: str) -> list[Any]:
    """The tensors of a template's `(schedule, [tensors])` result."""
    from tensorforge.te.tensor import Tensor

    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        raise TuneError(
            f"template {name!r} must return (schedule, [tensors]), got {type(result).__name__}"
        )
    tensors = list(result[1])
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TuneError(
                f"template {name!r}: tuning needs tensor arguments only, got {t!r}; "
                f"fix symbolic sizes and scalars as template arguments"
            )
    return tensors


def _ops_of(tensors: Sequence[Any]) -> list[Any]:
    from tensorforge.te.graph import topological_ops

    return topological_ops([t.op for t in tensors])


def workload_hash(tensors: Sequence[Any]) -> str:
    """sha256 of the computation: every operation the tensors depend on, printed in order."""
    from tensorforge.te.tensor import ComputeOp, PlaceholderOp

    lines = []
    for op in _ops_of(tensors):
        if isinstance(op, PlaceholderOp):
            lines.append(f"placeholder {op.name} {[str(e) for e in op.shape]} {op.dtype}")
        elif isinstance(op, ComputeOp):
            axes = [f"{iv.name}:{iv.dom.extent}" for iv in op.axis]
            reduce_axes = [f"{iv.name}:{iv.dom.min}+{iv.dom.extent}" for iv in op.reduce_axis]
            body = "; ".join(str(b) for b in op.body)
            lines.append(f"compute {op.name} {axes} {reduce_axes} {body}")
        else:
            lines.append(f"{type(op).__name__} {op.name}")
    lines.append("args " + " ".join(t.name for t in tensors))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def count_flop(tensors: Sequence[Any]) -> float:
    """Floating-point work of the computation: arithmetic per output point times the domain.

    `te.sum(A[i, k] * B[k, j], axis=k)` counts 2 per (i, j, k), as TVM does. Index arithmetic
    (inside `T[...]`) is not counted.
    """
    from tensorforge.te.expr import BinaryOp, Call, CompareOp, Reduce, TensorRead
    from tensorforge.te.tensor import ComputeOp

    def ops_in(expr: Any) -> int:
        if isinstance(expr, TensorRead):
            return 0
        if isinstance(expr, CompareOp):
            own = 0
        else:
            own = 1 if isinstance(expr, (BinaryOp, Call)) else 0
        from tensorforge.te.visit import children

        return own + sum(ops_in(c) for c in children(expr))

    total = 0.0
    for op in _ops_of(tensors):
        if not isinstance(op, ComputeOp):
            continue
        points = math.prod(_const(iv.dom.extent) for iv in op.axis)
        body = op.body[0]
        if isinstance(body, Reduce):
            inner = math.prod(_const(iv.dom.extent) for iv in op.reduce_axis)
            per_point = inner * (sum(ops_in(s) for s in body.source) + len(body.combiner.result))
        else:
            per_point = sum(ops_in(b) for b in op.body)
        total += points * per_point
    return float(total)


def _const(extent: Any) -> int:
    value = getattr(extent, "value", None)
    return value if isinstance(value, int) else 1


@dataclass(frozen=True)
class ArgSpec:
    """Shape and dtype of one tensor argument; `is_output` for tensors the kernel computes."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool


def _arg_specs(tensors: Sequence[Any]) -> tuple[ArgSpec, ...]:
    from tensorforge.te.tensor import PlaceholderOp

    specs = []
    for t in tensors:
        shape = tuple(_const_or_raise(e, t.name) for e in t.shape)
        specs.append(ArgSpec(t.name, shape, t.dtype, not isinstance(t.op, PlaceholderOp)))
    return tuple(specs)


def _const_or_raise(extent: Any, name: str) -> int:
    value = getattr(extent, "value", None)
    if not isinstance(value, int):
        raise TuneError(
            f"tensor '{name}' has a symbolic extent {extent}; tuning needs constant shapes"
        )
    return value


# -- tasks -----------------------------------------------------------------------------------------


class Task:
    """A template bound to arguments and a target: a space to search and a way to build configs."""

    def __init__(self, template: Template, args: Sequence[Any], target: str):
        from tensorforge.target import Target

        self.template = template
        self.name = template.name
        self.args = tuple(args)
        self.args_json = canonical_args(args)
        self.target = target
        with Target(target):
            space, result = template.define(args)
        tensors = _tensors_of(result, self.name)
        self.config_space = space
        self.workload_hash = workload_hash(tensors)
        self.arg_specs = _arg_specs(tensors)
        self.flop = space.flop or count_flop(tensors)

    @property
    def target_kind(self) -> str:
        return self.target.split()[0]

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(self.name, self.args_json, self.workload_hash, self.target)

    def config(self, config: ConfigEntity | int | dict) -> ConfigEntity:
        """A ConfigEntity of this task's space from an entity, an index or its JSON form."""
        if isinstance(config, ConfigEntity):
            return config
        if isinstance(config, int):
            return self.config_space.get(config)
        if isinstance(config, dict):
            entity = self.config_space.from_json(config)
            if entity is None:
                raise TuneError(f"config {config} does not fit the space of template {self.name!r}")
            return entity
        raise TypeError(f"expected a ConfigEntity, an index or a config dict, got {config!r}")

    def instantiate(self, config: ConfigEntity | int | dict) -> tuple[Any, list[Any]]:
        """Run the template with `config`: returns (schedule, tensors) ready for tf.build."""
        from tensorforge.target import Target

        entity = self.config(config)
        with Target(self.target), using_config(entity):
            result = self.template.func(*self.args)
        return result[0], list(result[1])

    def __repr__(self) -> str:
        return f"Task({self.name!r}, args={self.args_json}, target={self.target_kind!r}, configs={len(self.config_space)})"


def create_task(template: str | Template, args: Sequence[Any] = (), target: Any = "llvm") -> Task:
    """A Task for a registered template, its arguments and a target (e.g. "llvm", "cuda")."""
    return Task(get_template(template), tuple(args), resolve_target(target))


def resolve_target(target: Any) -> str:
    """The full target string (CPU model and features, or GPU architecture).

    A CUDA target without -arch is resolved in a short-lived child process, so this process never
    initializes CUDA (a forked measurement process could not use CUDA after that).
    """
    from tensorforge.target import Target

    if isinstance(target, Target):
        return str(target)
    spec = str(target or "llvm").strip()
    if spec.split()[0] in ("cuda", "nvidia") and "-arch=" not in spec:
        from tensorforge.tune.workers import call_in_child

        try:
            return call_in_child(lambda: str(Target(spec)), timeout=60)
        except Exception:  # noqa: BLE001 - fall back to detecting here
            pass
    return str(Target(spec))
