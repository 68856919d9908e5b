"""The Tuner base: the measure loop around `next_batch` / `update`, best tracking, history resume."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorforge.tune.measure import MeasureInput, MeasureOption, Measurer, MeasureResult
from tensorforge.tune.records import Record, load_records, screened
from tensorforge.tune.space import ConfigEntity
from tensorforge.tune.template import Task

logger = logging.getLogger("tensorforge.tune")


class Tuner:
    """Proposes configs (`next_batch`), learns from their measurements (`update`).

    `seed` fixes every random choice, so a run repeats exactly given the same measurements.
    """

    batch_size = 16

    def __init__(self, task: Task, seed: int | None = None):
        self.task = task
        self.space = task.config_space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()  # measured (or loaded, or in flight): never proposed again
        self.history: list[tuple[ConfigEntity, MeasureResult]] = []
        self.best_config: ConfigEntity | None = None
        self.best_result: MeasureResult | None = None
        self.best_cost = math.inf
        self.best_iter = 0  # trial number (this tuner's count) of the best so far
        self.n_trial = 0  # the n_trial of the running tune() call (progress bars read it)
        self.trial_count = 0  # trials measured by this tuner's tune() calls
        self.time_total = 0.0  # wall seconds inside tune()
        self.time_measure = 0.0  # of which building and measuring
        self._measurer: Measurer | None = None  # while tune() runs

    # -- what subclasses provide -----------------------------------------------------------------
    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        raise NotImplementedError

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured trials. The base marks them visited and tracks the best."""
        for inp, res in zip(inputs, results):
            self.visited.add(inp.config.index)
            self.history.append((inp.config, res))
            if res.ok and res.cost < self.best_cost:
                self.best_cost, self.best_config, self.best_result = res.cost, inp.config, res
                self.best_iter = len(self.history)

    def feature_fn(self) -> Callable[[Any], Any] | None:
        """What build processes should extract from each candidate's lowered IR (None: nothing)."""
        return None

    # -- shared --------------------------------------------------------------------------------------
    def has_next(self) -> bool:
        return len(self.visited) < len(self.space)

    @property
    def best_flops(self) -> float:
        """Best throughput so far in FLOP/s (0 before any success)."""
        return (
            self.task.flop / self.best_cost
            if self.best_result is not None and self.task.flop
            else 0.0
        )

    def random_unvisited(
        self, n: int, exclude: set[int] | frozenset = frozenset()
    ) -> list[ConfigEntity]:
        """Up to `n` distinct configs drawn uniformly from those not visited (nor in `exclude`)."""
        taken = self.visited | set(exclude)
        total = len(self.space)
        picks: list[int] = []
        chosen: set[int] = set()
        dims = self.space.dims
        for _ in range(50 * n):
            if len(picks) >= n or len(taken) + len(picks) >= total:
                break
            index = self.space.index_of([int(self.rng.integers(d)) for d in dims])
            if index not in taken and index not in chosen:
                picks.append(index)
                chosen.add(index)
        if len(picks) < n and total <= 2_000_000:  # nearly exhausted: draw from what is left
            left = np.setdiff1d(np.arange(total), np.fromiter(taken | chosen, dtype=np.int64))
            more = self.rng.permutation(left)[: n - len(picks)]
            picks.extend(int(i) for i in more)
        return [self.space.get(i) for i in picks]

    def load_history(self, source: Any, min_seed_records: int = 0) -> int:
        """Feed logged trials of this task (same template, args, computation and target) to the
        tuner and mark their configs measured, so `tune` measures none of them again. Returns how
        many records were used. `source` is a log path or a list of Records."""
        records = load_records(source) if not isinstance(source, (list, tuple)) else list(source)
        key = self.task.key
        inputs, results = [], []
        for rec in records:
            if not isinstance(rec, Record) or rec.key != key:
                continue
            config = self.space.from_json(rec.config)
            if config is None or config.index in self.visited:
                continue
            inputs.append(MeasureInput(self.task, config))
            results.append(self._screen(rec.result))
            self.visited.add(config.index)
        if len(inputs) >= min_seed_records and inputs:
            self.update(inputs, results)
        logger.info("load_history: %d records for %s", len(inputs), self.task)
        return len(inputs)

    def tune(
        self,
        n_trial: int,
        measure_option: MeasureOption,
        callbacks: Sequence[Callable[..., Any]] = (),
        early_stopping: int | None = None,
    ) -> None:
        """Measure up to `n_trial` new configs in batches, calling each callback per trial.

        Stops early when the space is exhausted, or when `early_stopping` trials in a row brought
        no improvement.
        """
        self.n_trial = n_trial
        callbacks = list(callbacks)
        start = time.perf_counter()
        # A runner that drives whole runs (RayRunner) brings its own measurer.
        make_measurer = getattr(measure_option.runner, "create_measurer", None) or Measurer
        measurer = make_measurer(self.task, measure_option, self.feature_fn())
        self._measurer = measurer
        done = 0
        try:
            while done < n_trial and self.has_next():
                # A cluster keeps more builds in flight than one machine: it asks for more.
                batch = max(self.batch_size, getattr(measurer, "batch_size", 0))
                configs = self.next_batch(min(batch, n_trial - done))
                if not configs:
                    break
                self.visited.update(c.index for c in configs)
                inputs = [MeasureInput(self.task, c) for c in configs]

                def report(position: int, result: MeasureResult, inputs=inputs) -> None:
                    for callback in callbacks:
                        callback(self, [inputs[position]], [self._screen(result)])

                t0 = time.perf_counter()
                results = [self._screen(r) for r in measurer.measure(configs, report)]
                self.time_measure += time.perf_counter() - t0
                self.update(inputs, results)
                done += len(results)
                self.trial_count += len(results)
                if (
                    early_stopping is not None
                    and len(self.history) - self.best_iter >= early_stopping
                ):
                    logger.info("tune: no improvement in %d trials; stopping early", early_stopping)
                    break
            finish = getattr(measurer, "finish", None)  # e.g. re-measure the top candidates
            if finish is not None and done:
                finish(self, callbacks)
        finally:
            self.time_total += time.perf_counter() - start
            self._measurer = None
            close_measurer = getattr(measurer, "close", None)
            if close_measurer is not None:
                close_measurer()
            for callback in callbacks:
                close = getattr(callback, "close", None)
                if close is not None:
                    close()

    def _screen(self, result: MeasureResult) -> MeasureResult:
        """An impossible timing (1e-12 s, faster than the target's peak) becomes an error."""
        return screened(result, float(self.task.flop or 0.0), self.task.target)

    @property
    def measure_fraction(self) -> float:
        """The share of tune() wall time spent building and measuring (the rest is the tuner's)."""
        return self.time_measure / self.time_total if self.time_total else 0.0
