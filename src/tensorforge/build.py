"""lower() and build(): the one place that wires te -> schedule -> ir -> codegen -> runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorforge.errors import ArgumentError, TensorForgeError
from tensorforge.ir.pipeline import run_pipeline
from tensorforge.ir.stmt import PrimFunc
from tensorforge.schedule.schedule import Schedule
from tensorforge.schedule.to_ir import schedule_to_func
from tensorforge.target import as_target


def lower(
    s: Schedule,
    args: Sequence[Any],
    name: str = "main",
    target: Any = None,
    trace: bool = False,
    simple_mode: bool = False,
) -> PrimFunc:
    """The loop IR of schedule `s` with parameters `args`, after every pass (print() it to read).

    `simple_mode` is TVM's (print only the loop nest); the printed PrimFunc is that already.
    """
    if not isinstance(s, Schedule):
        raise ArgumentError(
            f"lower: expected a Schedule (te.create_schedule(...)), got {type(s).__name__}"
        )
    if not isinstance(args, (list, tuple)):
        raise ArgumentError("lower: args must be a list of tensors and scalar vars")
    func = schedule_to_func(s, list(args), name, trace=trace)
    return run_pipeline(func, as_target(target), trace=trace)


def build(
    s_or_func: Schedule | PrimFunc,
    args: Sequence[Any] | None = None,
    target: Any = None,
    name: str = "main",
):
    """Compile a schedule (or an already lowered PrimFunc) into a callable runtime Module.

    Without `target`, for `Target.current()` inside `with tf.Target(...)`, else for "llvm".
    """
    from tensorforge.codegen.base import codegen_for
    from tensorforge.runtime.module import Module

    tgt = as_target(target)
    if isinstance(s_or_func, PrimFunc):
        func = s_or_func
    else:
        if args is None:
            raise ArgumentError(
                "build: pass args (the tensors and scalars of the kernel) with a Schedule"
            )
        func = lower(s_or_func, args, name=name, target=tgt)
    try:
        source = codegen_for(tgt.kind).generate(func, tgt)
    except TensorForgeError:
        raise
    return Module.from_sources([source], tgt)
