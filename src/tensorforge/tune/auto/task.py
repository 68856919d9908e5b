"""SearchTask and register_workload: a te computation, its arguments and a target (API.md §8).

A workload is a function from arguments to a list of tensors (inputs and outputs), with no
schedule. A candidate schedule is a `ScheduleTrace`: the decisions the sketch rules took and the
primitive calls they made. It is what the log stores; replaying its steps on a fresh schedule
(`instantiate`) rebuilds the schedule, so a record reads back without the search that found it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensorforge.tune.auto.decisions import Decisions
from tensorforge.tune.auto.trace import Step, apply_steps, to_python
from tensorforge.tune.template import (
    TuneError,
    WorkloadKey,
    _arg_specs,
    canonical_args,
    count_flop,
    resolve_target,
    workload_hash,
)

_WORKLOADS: dict[str, Callable[..., Any]] = {}


def register_workload(func: Callable[..., Any] | str | None = None, *, name: str | None = None):
    """Register a workload function (`@auto.register_workload`, or with `name=`): it returns the
    tensors of the computation, inputs and outputs, in argument order."""
    if isinstance(func, str):
        name, func = func, None

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        _WORKLOADS[name or _default_name(f)] = f
        return f

    return register(func) if func is not None else register


def _default_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", getattr(func, "__name__", "workload"))


def get_workload(name: str) -> Callable[..., Any]:
    try:
        return _WORKLOADS[name]
    except KeyError:
        known = ", ".join(sorted(_WORKLOADS)) or "none"
        raise TuneError(
            f"no auto-scheduling workload named {name!r} (registered: {known})"
        ) from None


@dataclass(frozen=True)
class ScheduleTrace:
    """One candidate: the decisions taken and the primitive calls they produced."""

    decisions: dict = field(hash=False, compare=False)
    steps: tuple[Step, ...]

    @functools.cached_property
    def index(self) -> int:
        """A stable number naming the schedule (the measurer keys reports by it)."""
        text = json.dumps([s.to_json() for s in self.steps], separators=(",", ":"))
        return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "decisions": self.decisions,
            "steps": [s.to_json() for s in self.steps],
        }

    @staticmethod
    def from_json(data: dict) -> ScheduleTrace:
        steps = tuple(Step.from_json(s) for s in data["steps"])
        return ScheduleTrace(dict(data.get("decisions", {})), steps)


class _DefaultSpace:
    """What the measurer asks of a task's space: the default config (here, no schedule)."""

    def default(self) -> ScheduleTrace:
        return ScheduleTrace({}, ())


class SearchTask:
    """A computation to auto-schedule for `target` (API.md §8).

    `func` is a workload function (registered or not) or a registered name; `args` its
    arguments (JSON data: numbers, strings, lists).
    """

    def __init__(
        self, func: Callable[..., Any] | str, args: Sequence[Any] = (), target: Any = "llvm"
    ):
        from tensorforge.target import Target

        if isinstance(func, str):
            self.workload_name = func
            func = get_workload(func)
        else:
            self.workload_name = next(
                (n for n, f in _WORKLOADS.items() if f is func), _default_name(func)
            )
        self.func = func
        self.name = f"auto/{self.workload_name}"
        self.args = tuple(args)
        self.args_json = canonical_args(self.args)
        self.target = resolve_target(target)
        self.target_obj = Target(self.target)
        tensors = self._tensors()
        self.workload_hash = workload_hash(tensors)
        self.arg_specs = _arg_specs(tensors)
        self.flop = count_flop(tensors)
        self.config_space = _DefaultSpace()

    def _tensors(self) -> list[Any]:
        from tensorforge.te.tensor import Tensor

        with self.target_obj:
            result = self.func(*self.args)
        tensors = list(result) if isinstance(result, (list, tuple)) else [result]
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TuneError(
                    f"workload {self.workload_name!r} must return a list of tensors (inputs and "
                    f"outputs), got {t!r}"
                )
        return tensors

    @property
    def target_kind(self) -> str:
        return self.target.split()[0]

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(self.name, self.args_json, self.workload_hash, self.target)

    def fresh(self) -> tuple[Any, list[Any]]:
        """A new unscheduled schedule of the computation, and its tensors."""
        from tensorforge.te import create_schedule
        from tensorforge.te.tensor import PlaceholderOp

        tensors = self._tensors()
        outputs = [t.op for t in tensors if not isinstance(t.op, PlaceholderOp)]
        if not outputs:
            raise TuneError(f"workload {self.workload_name!r} returned no computed tensor")
        return create_schedule(outputs), tensors

    # -- candidates -----------------------------------------------------------------------------
    def generate(self, decisions: Decisions) -> tuple[ScheduleTrace, Any, list[Any]]:
        """Apply the sketch rules with `decisions`: (trace, schedule, tensors)."""
        from tensorforge.tune.auto.sketch import generate

        s, tensors = self.fresh()
        steps = generate(s, self.target_obj, decisions)
        return ScheduleTrace(dict(decisions.used), tuple(steps)), s, tensors

    def sample(self, seed: int | None = None, fixed: dict | None = None) -> ScheduleTrace:
        """A random legal schedule (the same for the same seed)."""
        return self.generate(Decisions(seed, fixed))[0]

    def config(self, config: Any) -> ScheduleTrace:
        if isinstance(config, ScheduleTrace):
            return config
        if isinstance(config, dict):
            return ScheduleTrace.from_json(config)
        raise TypeError(f"expected a ScheduleTrace or its JSON form, got {config!r}")

    def instantiate(self, config: Any) -> tuple[Any, list[Any]]:
        """Replay a trace on a fresh schedule: (schedule, tensors) ready for tf.build."""
        trace = self.config(config)
        s, tensors = self.fresh()
        with self.target_obj:
            apply_steps(s, trace.steps)
        return s, tensors

    def to_python(self, config: Any) -> str:
        """The schedule of `config` as the Python primitive calls that make it."""
        trace = self.config(config)
        s, tensors = self.fresh()
        call = f"{self.workload_name}(*{list(self.args)!r})"
        return to_python(s, tensors, trace.steps, call)

    def default_schedule(self) -> tuple[Any, list[Any]]:
        """The rule-based first guess, chosen by the analytic model of the target (no
        measurement): (schedule, tensors)."""
        from tensorforge.tune.auto.analytic import first_guess

        trace = first_guess(self)
        return self.instantiate(trace)

    # -- tuning and its log --------------------------------------------------------------------
    def tune(
        self,
        trials: int = 64,
        log: Any = None,
        seed: int | None = 0,
        measure_option: Any = None,
        progress: bool = True,
        model: bool = True,
        **search_options: Any,
    ) -> Any:
        """Search `trials` more schedules, measuring each in its own process (fault-isolated),
        appending each to `log` as it is measured. A log already holding trials of this task is
        resumed: they are not measured again and the search starts from them. `model=False`
        searches at random. Ctrl-C stops with the log intact. `search_options` go to
        EvolutionarySearch (population, generations, epsilon...). Returns the tuner (its
        `best_cost`, `best_trace`); `trials=0` measures nothing."""
        from tensorforge.tune.auto.tuning import TaskTuner, tune

        tuner = TaskTuner(self, seed=seed, model=model, **search_options)
        return tune(self, trials, log, seed, measure_option, progress, model, tuner)

    def best_trace(self, log: Any) -> ScheduleTrace:
        """The fastest logged schedule of this task."""
        from tensorforge.tune.auto.tuning import best_record

        return ScheduleTrace.from_json(best_record(self, log).config)

    def apply_best(self, log: Any) -> tuple[Any, list[Any]]:
        """The fastest logged schedule, replayed: (schedule, tensors), buildable and editable."""
        return self.instantiate(self.best_trace(log))

    def print_best(self, log: Any) -> str:
        """The fastest logged schedule as Python primitive calls."""
        return self.to_python(self.best_trace(log))

    def __repr__(self) -> str:
        return f"SearchTask({self.workload_name!r}, args={self.args_json}, target={self.target_kind!r})"
