"""How an operator's heuristics become tunable knobs: one code path for the default schedule
and the template.

An operator's schedule function reads each decision through `choose(cfg, name, default, others)`:
`default` is what the heuristic picks from the Target's facts (vector width, registers, cache
sizes, cores), and it is the knob's first choice. So the default config of the operator's
template (every knob at its first choice) is the default schedule, and a tuner searches the
heuristic's alternatives. Outside any template `tune.get_config()` gives a throwaway default
config, so calling the schedule function plainly gives the default schedule.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from typing import Any

from tensorforge.target import Target


def choose(cfg: Any, name: str, default: Any, others: Iterable[Any] = ()) -> Any:
    """Define knob `name` with the heuristic's `default` first, then `others`; return the choice."""
    values = [default] + [v for v in others if v != default]
    cfg.define_knob(name, values)
    return cfg[name].val


def workload(args: tuple, parallel: bool) -> tuple:
    """A template's arguments as `tensorforge tune` writes them: `parallel` only when False,
    so a log tuned from the command line applies to the plain call (records match by args)."""
    return args if parallel else (*args, False)


def target_scope(target: Target | str | None) -> Any:
    """`with target_scope(t):` makes `t` current (templates read `Target.current()`); a None
    target keeps the current one (or the host CPU)."""
    if target is None:
        return nullcontext() if Target.current() is not None else Target("llvm")
    return target if isinstance(target, Target) else Target(target)


def current_target() -> Target:
    """The target a template is being instantiated for (the host CPU outside any)."""
    return Target.current() or Target("llvm")


def is_gpu(target: Target) -> bool:
    """Does `target` generate GPU kernels? (One place to ask, until Target says so itself.)"""
    flag = getattr(target, "is_gpu", None)
    if callable(flag):
        flag = flag()
    return bool(flag) if flag is not None else target.kind == "cuda"
