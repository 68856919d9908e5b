"""Tuning a model's kernels: each kernel as an auto-scheduler task, and a log applied at build.

A kernel of the graph layer is a te computation with no template, so it is tuned by the
auto-scheduler (`tune.auto.SearchTask`): its workload is the kernel's own tensors (inputs, then
the output), named `graph/<kernel>`. The kernel's rule-based schedule (schedules.py) is recorded
as a schedule trace too, measured first and logged, so the search starts from it and a tuned
kernel is never slower than the rule (as measured).

`collecting()` makes `build_kernels` note each kernel it builds; `tune_kernels` tunes them all
into one log with the task scheduler; `tuned_schedule` finds a kernel's best record in a log and
replays it (the backend's `tuning_log` option). Kernels with symbolic sizes are not tuned.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from tensorforge import te
from tensorforge.target import Target

_collector: list | None = None
_log_cache: dict[str, tuple[float, dict]] = {}


@dataclass
class KernelTask:
    """A kernel to tune: its auto-scheduler task, its rule-based schedule as a trace, and how
    many kernels of the model share it (its weight)."""

    task: Any
    rule: Any
    weight: int = 1


@contextlib.contextmanager
def collecting():
    """`with collecting() as kernels:` every kernel built inside is noted as (spec, target)."""
    global _collector
    previous, _collector = _collector, []
    try:
        yield _collector
    finally:
        _collector = previous


def note(spec, target) -> None:
    if _collector is not None:
        _collector.append((spec, target))


# -- the kernel as a task ---------------------------------------------------------------------


def kernel_tensors(spec) -> list:
    return spec.tensors


def is_static(spec) -> bool:
    return all(
        isinstance(getattr(e, "value", None), int) for t in kernel_tensors(spec) for e in t.shape
    )


def kernel_task(spec, target):
    """The auto-scheduler task of a kernel (None where its sizes are symbolic, or where its
    product is ops/cpu_dot's micro-kernel: a tensorized call the sketches cannot express)."""
    from tensorforge.tune.auto import SearchTask

    if not is_static(spec) or (spec.anchor is not None and "cpu_dot" in spec.anchor.info):
        return None
    if spec.anchor is not None and spec.anchor.kind == "extern":  # its loops are its program's
        return None
    tensors = kernel_tensors(spec)

    def workload():
        return tensors

    workload.__qualname__ = workload.__name__ = f"graph/{spec.name}"
    return SearchTask(workload, [], _target_string(target))


def _target_string(target) -> str:
    return str(target) if isinstance(target, Target) else target


def rule_trace(spec, target):
    """The kernel's rule-based schedule (schedules.py), recorded as a replayable trace."""
    from tensorforge.graph.schedules import schedule_kernel
    from tensorforge.tune.auto import ScheduleTrace
    from tensorforge.tune.auto.trace import Recorder

    s = te.create_schedule([spec.out.op])
    recorder = Recorder(s)
    schedule_kernel(spec, target, s=_RecordingSchedule(recorder))
    return ScheduleTrace({}, tuple(recorder.steps))


class _RecordingStage:
    """A stage whose primitive calls are recorded as trace steps (the ones schedules.py uses)."""

    def __init__(self, recorder, stage):
        self._recorder, self._stage = recorder, stage

    @property
    def op(self):
        return self._stage.op

    def split(self, axis, factor):
        return self._recorder.split(self._stage, axis, factor)

    def fuse(self, *axes):
        return self._recorder.fuse(self._stage, list(axes))

    def reorder(self, *axes):
        self._recorder.reorder(self._stage, list(axes))

    def vectorize(self, axis):
        self._recorder.annotate("vectorize", self._stage, axis)

    def parallel(self, axis):
        self._recorder.annotate("parallel", self._stage, axis)

    def unroll(self, axis):
        self._recorder.annotate("unroll", self._stage, axis)

    def compute_at(self, parent, axis):
        self._recorder.compute_at(self._stage, parent._stage, axis)

    def bind(self, axis, thread):
        self._recorder.bind(self._stage, axis, thread.thread_tag)


class _RecordingSchedule:
    def __init__(self, recorder):
        self._recorder = recorder

    def __getitem__(self, tensor):
        return _RecordingStage(self._recorder, self._recorder.s[tensor])

    def __contains__(self, tensor) -> bool:  # (schedules.py asks which stages it holds)
        return tensor in self._recorder.s


def collect_tasks(kernels: list) -> list[KernelTask]:
    """The noted kernels as tasks, one per distinct computation (shared ones weigh more)."""
    found: dict = {}
    for spec, target in kernels:
        task = kernel_task(spec, target)
        if task is None:
            continue
        if task.key in found:
            found[task.key].weight += 1
        else:
            found[task.key] = KernelTask(task, rule_trace(spec, target))
    return list(found.values())


# -- tuning -----------------------------------------------------------------------------------


def tune_kernels(
    kernels: list[KernelTask],
    trials: int,
    log: str,
    measure_option: Any = None,
    seed: int | None = 0,
    progress: bool = True,
) -> Any:
    """Measure each kernel's rule-based schedule, then spend `trials` more measurements over
    the kernels with the task scheduler; everything lands in `log`. Returns the scheduler."""
    from tensorforge.tune.auto import TaskScheduler
    from tensorforge.tune.auto.tuning import task_records, warm_runner
    from tensorforge.tune.callbacks import log_to_file
    from tensorforge.tune.measure import MeasureInput, Measurer
    from tensorforge.tune.measure import measure_option as make_option

    option = measure_option or make_option(number=3, repeat=3, timeout=20)
    if option.runner is None:
        import dataclasses

        option = dataclasses.replace(option, runner=warm_runner)
    writer = log_to_file(log)
    try:
        for kernel in kernels:
            logged = {r.config.get("index") for r in task_records(kernel.task, log)}
            if kernel.rule.index in logged:
                continue
            inputs = [MeasureInput(kernel.task, kernel.rule)]
            results = Measurer(kernel.task, option).measure([kernel.rule])
            writer(None, inputs, results)
    finally:
        close = getattr(writer, "close", None)
        if close is not None:
            close()
    scheduler = TaskScheduler(
        [k.task for k in kernels],
        weights=[k.weight for k in kernels],
        log=log,
        seed=seed,
        measure_option=option,
        slice_trials=max(1, min(16, trials // max(1, len(kernels)))),
    )
    if trials > 0:
        scheduler.tune(trials, progress=progress)
    return scheduler


# -- applying a log ---------------------------------------------------------------------------


def _records(log: str) -> dict:
    """The log's best successful record per workload key (re-read when the file changes)."""
    from tensorforge.tune.auto.search import seconds
    from tensorforge.tune.records import load_records

    mtime = os.path.getmtime(log)
    cached = _log_cache.get(log)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    best: dict = {}
    for rec in load_records(log):
        if not rec.result.ok or "steps" not in rec.config:
            continue
        if rec.key not in best or seconds(rec.result) < seconds(best[rec.key].result):
            best[rec.key] = rec
    _log_cache[log] = (mtime, best)
    return best


def tuned_schedule(spec, target, log: str):
    """(schedule, source) from the log's best record of this kernel, or None if it has none."""
    from tensorforge.tune.auto import ScheduleTrace
    from tensorforge.tune.auto.search import seconds
    from tensorforge.tune.auto.trace import apply_steps

    if not os.path.exists(log) or not is_static(spec):
        return None
    task = kernel_task(spec, target)
    record = _records(log).get(task.key)
    if record is None:
        return None
    trace = ScheduleTrace.from_json(record.config)
    s = te.create_schedule([spec.out.op])
    with task.target_obj:
        apply_steps(s, trace.steps)
    return s, f"tuned: log record {trace.index} ({seconds(record.result) * 1e3:.4g} ms)"
