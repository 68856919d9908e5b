"""The tuning loop of one SearchTask: batches from the search, measured in isolated processes,
logged as they land, resumable from the log, interruptible with Ctrl-C."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from tensorforge.tune.auto.screening import ScreeningMeasurer, build_report
from tensorforge.tune.auto.search import EvolutionarySearch, seconds
from tensorforge.tune.auto.task import ScheduleTrace, SearchTask
from tensorforge.tune.measure import MeasureInput, MeasureOption, MeasureResult
from tensorforge.tune.records import Record, load_records
from tensorforge.tune.template import TuneError

logger = logging.getLogger("tensorforge.tune")


def warm_runner(task: Any, mod: Any, option: MeasureOption, reference: Any) -> list[float]:
    """The default runner, after one untimed call: the first call in a fresh process pays for
    page faults on fresh arrays and cold caches (measured: 5-10x the steady time)."""
    from tensorforge.tune.measure import check_outputs, device_arrays, make_host_arrays, to_numpy

    dev, arrays = device_arrays(task, make_host_arrays(task.arg_specs))
    mod(*arrays)
    if reference is not None:
        check_outputs(task.arg_specs, [to_numpy(a) for a in arrays], reference)
    timer = mod.time_evaluator(
        getattr(mod, "entry_name", None) or "main",
        dev,
        number=option.number,
        repeat=option.repeat,
        min_repeat_ms=option.min_repeat_ms,
    )
    return [float(c) for c in timer(*arrays).results]


def task_records(task: SearchTask, log: str | os.PathLike | None) -> list[Record]:
    """The log's records of this task (same workload, arguments, computation and target)."""
    if log is None or not os.path.exists(log):
        return []
    return [r for r in load_records(log) if r.key == task.key]


def best_record(task: SearchTask, log: str | os.PathLike) -> Record:
    records = [r for r in task_records(task, log) if r.result.ok]
    if not records:
        why = "no successful record" if os.path.exists(log) else "the log does not exist"
        raise TuneError(f"{task}: {why} in {os.fspath(log)!r}; tune first (task.tune(...))")
    return min(records, key=lambda r: seconds(r.result))


class TaskTuner:
    """Tunes one task: keeps the search state between calls (the task scheduler calls it in
    slices)."""

    def __init__(
        self,
        task: SearchTask,
        seed: int | None = 0,
        model: bool = True,
        batch_size: int = 16,
        **search_options: Any,
    ):
        self.task = task
        self.search = EvolutionarySearch(task, seed=seed, model=model, **search_options)
        self.batch_size = batch_size
        self.trials = 0
        self.time_total = 0.0
        self.time_measure = 0.0  # building (lowering the screened shortlist too) and timing
        self.time_screen_dropped = 0.0  # of that, lowering candidates then not measured
        self._loaded: set[str] = set()
        self.interrupted = False  # Ctrl-C stopped the last run

    @property
    def best_cost(self) -> float:
        return self.search.best[0]

    @property
    def best_trace(self) -> ScheduleTrace | None:
        return self.search.best[1]

    def resume(self, log: str | os.PathLike | None) -> int:
        """Feed the log's records of this task to the search (each once); returns how many."""
        if log is None or os.fspath(log) in self._loaded:
            return 0
        self._loaded.add(os.fspath(log))
        traces, results = [], []
        for rec in task_records(self.task, log):
            try:
                trace = ScheduleTrace.from_json(rec.config)
            except (KeyError, TypeError, ValueError):
                continue
            if trace.index not in self.search.measured:
                traces.append(trace)
                results.append(rec.result)
        self.search.update(traces, results)
        return len(traces)

    def run(
        self,
        trials: int,
        option: MeasureOption,
        callbacks: Sequence[Callable[..., Any]] = (),
    ) -> int:
        """Measure up to `trials` new schedules; returns how many were measured."""
        # A runner that drives whole runs (tune.RayRunner) brings its own measurer.
        make_measurer = getattr(option.runner, "create_measurer", None) or ScreeningMeasurer
        measurer = make_measurer(self.task, option, build_report)
        screen = getattr(measurer, "screen", None) if self.search.lower_in_workers else None
        # A measurer that spreads over many workers (tune.RayRunner) asks for larger batches so
        # builds stay in flight while the devices measure; a guided search still re-ranks every
        # 64 (Ansor's measures per round), a random one needs no ranking between batches.
        wanted = getattr(measurer, "batch_size", 0)
        batch_size = max(self.batch_size, min(wanted, 64) if self.search.use_model else wanted)
        done = 0
        start = time.perf_counter()
        try:
            while done < trials:
                batch = self.search.next_batch(min(batch_size, trials - done), screen)
                if not batch:
                    break
                inputs = [MeasureInput(self.task, t) for t in batch]

                def report(position: int, result: MeasureResult, inputs=inputs) -> None:
                    for callback in callbacks:
                        callback(self, [inputs[position]], [result])

                t0 = time.perf_counter()
                results = measurer.measure(batch, report)
                self.time_measure += time.perf_counter() - t0
                for trace, reported in [(t, measurer.features.pop(t.index, None)) for t in batch]:
                    if reported is not None:
                        digest, feats = reported
                        self.search.ir_seen.add(digest)
                        self.search.take_features({trace.index: feats})
                self.search.update(batch, results)
                done += len(batch)
                self.trials += len(batch)
        finally:
            self.time_total += time.perf_counter() - start
            close = getattr(measurer, "close", None)
            if close is not None:
                close()
            screened = getattr(measurer, "n_screened", 0)
            if screened:
                self.time_measure += measurer.time_screen
                share = measurer.n_dropped / screened
                self.time_screen_dropped += measurer.time_screen * share
        return done

    @property
    def measure_fraction(self) -> float:
        """The share of the wall time spent building and timing candidates."""
        return self.time_measure / self.time_total if self.time_total else 0.0

    @property
    def measure_fraction_strict(self) -> float:
        """measure_fraction, counting the lowering of screened candidates that were then not
        measured (their share of the screening time) as the search's own time."""
        useful = self.time_measure - self.time_screen_dropped
        return useful / self.time_total if self.time_total else 0.0


def tune(
    task: SearchTask,
    trials: int,
    log: str | os.PathLike | None = None,
    seed: int | None = 0,
    measure_option: MeasureOption | None = None,
    progress: bool = True,
    model: bool = True,
    tuner: TaskTuner | None = None,
) -> TaskTuner:
    """Tune `task` for `trials` more measurements (see SearchTask.tune)."""
    from tensorforge.tune.callbacks import log_to_file, progress_bar
    from tensorforge.tune.measure import measure_option as make_option

    option = measure_option or make_option(number=3, repeat=3, timeout=20)
    if option.runner is None:
        option = dataclasses.replace(option, runner=warm_runner)
    tuner = tuner or TaskTuner(task, seed=seed, model=model)
    resumed = tuner.resume(log)
    if resumed:
        logger.info("%s: resumed from %d logged trials", task, resumed)
    callbacks: list[Any] = []
    if log is not None:
        callbacks.append(log_to_file(log))
    if progress:
        callbacks.append(progress_bar(total=trials, prefix=f"{task.workload_name} "))
    try:
        tuner.run(trials, option, callbacks)
    except KeyboardInterrupt:
        tuner.interrupted = True
        where = f"{os.fspath(log)!r}; run again with the same log to resume" if log else "no log"
        print(
            f"\ninterrupted after {tuner.trials} trials: every measured trial is in {where}",
            file=sys.stderr,
        )
    finally:
        for callback in callbacks:
            close = getattr(callback, "close", None)
            if close is not None:
                close()
    if math.isfinite(tuner.best_cost):
        logger.info("%s: best %.3g ms", task, tuner.best_cost * 1e3)
    return tuner
