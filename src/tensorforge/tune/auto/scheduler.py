"""The task scheduler: one budget of trials shared among many kernels (a model's).

The model's time is `sum(weight_i * best_i)` (a kernel's weight: how often the model runs it).
After one warm-up slice each, every slice of trials goes to the kernel whose next slice is
expected to cut that sum most: its weight times the rate its best time recently fell per trial,
blended with an optimistic rate for kernels tuned little so far (best / trials spent), as
Ansor's gradient scheduler does. A kernel with no working schedule yet goes first.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from tensorforge.tune.auto.task import SearchTask
from tensorforge.tune.auto.tuning import TaskTuner
from tensorforge.tune.measure import MeasureOption


class TaskScheduler:
    def __init__(
        self,
        tasks: Sequence[SearchTask],
        weights: Sequence[float] | None = None,
        log: str | os.PathLike | None = None,
        seed: int | None = 0,
        measure_option: MeasureOption | None = None,
        slice_trials: int = 16,
        backward_window: int = 2,
        **search_options: Any,
    ):
        if not tasks:
            raise ValueError("TaskScheduler: give at least one SearchTask")
        self.tasks = list(tasks)
        self.weights = [float(w) for w in (weights or [1.0] * len(self.tasks))]
        if len(self.weights) != len(self.tasks):
            raise ValueError(
                f"TaskScheduler: {len(self.weights)} weights for {len(self.tasks)} tasks"
            )
        self.log = log
        self.option = measure_option
        self.slice_trials = slice_trials
        self.window = backward_window
        self.tuners = [
            TaskTuner(
                t,
                seed=None if seed is None else seed + k,
                batch_size=slice_trials,
                **search_options,
            )
            for k, t in enumerate(self.tasks)
        ]
        self.curves: list[list[tuple[int, float]]] = [[] for _ in self.tasks]  # (trials, best)
        self.allocation: list[int] = [0] * len(self.tasks)  # trials given to each task

    @property
    def total_cost(self) -> float:
        """The weighted sum of the best times (seconds per model run)."""
        return sum(w * t.best_cost for w, t in zip(self.weights, self.tuners))

    def choose(self) -> int:
        """The task to give the next slice to."""
        for k, curve in enumerate(self.curves):
            if not curve:  # warm-up: one slice each, in order
                return k
        best_score, choice = -1.0, 0
        for k, (tuner, weight, curve) in enumerate(zip(self.tuners, self.weights, self.curves)):
            if not math.isfinite(tuner.best_cost):
                return k
            trials, best = curve[-1]
            then_trials, then_best = curve[max(0, len(curve) - 1 - self.window)]
            backward = (then_best - best) / max(1, trials - then_trials)
            forward = best / max(1, trials)  # optimistic: the next slice could win that much
            score = weight * (0.5 * backward + 0.5 * forward)
            if score > best_score:
                best_score, choice = score, k
        return choice

    def tune(self, trials: int, progress: bool = True) -> TaskScheduler:
        """Spend `trials` measurements over the tasks (logs and resumes like SearchTask.tune)."""
        from tensorforge.tune.auto.tuning import tune as tune_one

        for tuner in self.tuners:
            tuner.resume(self.log)
        spent = 0
        while spent < trials:
            k = self.choose()
            before = self.tuners[k].trials
            n = min(self.slice_trials, trials - spent)
            tune_one(
                self.tasks[k],
                n,
                self.log,
                measure_option=self.option,
                progress=False,
                tuner=self.tuners[k],
            )
            measured = self.tuners[k].trials - before
            spent += max(1, measured)
            self.allocation[k] += measured
            self.curves[k].append((self.tuners[k].trials, self.tuners[k].best_cost))
            if progress:
                print(
                    f"[{spent}/{trials}] {self.tasks[k].workload_name}: best "
                    f"{self.tuners[k].best_cost * 1e3:.4g} ms; total {self.total_cost * 1e3:.4g} ms",
                    file=sys.stderr,
                )
            if measured == 0 or self.tuners[k].interrupted:  # Ctrl-C, or nothing left to try
                break
        return self
