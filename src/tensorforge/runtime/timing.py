"""Timing compiled functions the way TVM's `time_evaluator` does, and the result it returns."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from tensorforge.errors import ArgumentError


@dataclass(frozen=True)
class BenchmarkResult:
    """Seconds per call, one entry per measurement (`repeat` of them), with summaries."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def std(self) -> float:
        """Population standard deviation (numpy's default, as TVM reports it)."""
        return statistics.pstdev(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def max(self) -> float:
        return max(self.results)

    def __str__(self) -> str:
        columns = ("mean", "median", "max", "min", "std")
        header = "".join(f"{name + ' (ms)':>14}" for name in columns)
        row = "".join(f"{getattr(self, name) * 1e3:>14.4f}" for name in columns)
        return f"Execution time summary:\n{header}\n{row}"


def measure(
    call: Callable[[], object],
    synchronize: Callable[[], object] | None = None,
    number: int = 10,
    repeat: int = 1,
    min_repeat_ms: float = 0,
    limit_zero_time_iterations: int = 100,
    cooldown_interval_ms: float = 0,
    repeats_to_cooldown: int = 1,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> BenchmarkResult:
    """Time `call()` as TVM's time_evaluator does (src/runtime/profiling.cc, WrapTimeEvaluator).

    One warm-up call, then `repeat` measurements. A measurement runs `call` `number` times; while
    it lasts less than `min_repeat_ms`, `number` grows (to min_repeat_ms / per-call time + 1, at
    least x1.618) and the measurement is taken again. The grown `number` carries over to later
    measurements. `synchronize` (e.g. waiting for the GPU) runs after the warm-up and inside each
    measurement's timed span, after its last call, so queued device work is counted.
    """
    check_timing_options(
        number,
        repeat,
        min_repeat_ms,
        limit_zero_time_iterations,
        cooldown_interval_ms,
        repeats_to_cooldown,
    )
    sync = synchronize or (lambda: None)
    call()  # warm-up: first-call costs (page faults, lazy initialization) stay out of the figures
    sync()
    results = []
    for index in range(repeat):
        duration_ms = 0.0
        zero_times = 0
        while True:
            if duration_ms > 0.0:
                number = int(max(min_repeat_ms / (duration_ms / number) + 1, number * 1.618))
            start = clock()
            for _ in range(number):
                call()
            sync()
            elapsed_ns = clock() - start
            if elapsed_ns == 0:
                zero_times += 1
            duration_ms = elapsed_ns / 1e6
            if duration_ms >= min_repeat_ms or zero_times >= limit_zero_time_iterations:
                break
        results.append(duration_ms / 1e3 / number)
        if cooldown_interval_ms > 0 and index % repeats_to_cooldown == 0:
            time.sleep(cooldown_interval_ms / 1e3)
    return BenchmarkResult(tuple(results))


def check_timing_options(
    number: int = 10,
    repeat: int = 1,
    min_repeat_ms: float = 0,
    limit_zero_time_iterations: int = 100,
    cooldown_interval_ms: float = 0,
    repeats_to_cooldown: int = 1,
) -> None:
    """ArgumentError unless the options make sense (counts >= 1, times >= 0)."""
    _check_positive("number", number)
    _check_positive("repeat", repeat)
    _check_positive("limit_zero_time_iterations", limit_zero_time_iterations)
    _check_positive("repeats_to_cooldown", repeats_to_cooldown)
    for name, value in (
        ("min_repeat_ms", min_repeat_ms),
        ("cooldown_interval_ms", cooldown_interval_ms),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ArgumentError(f"time_evaluator: {name} must be a number >= 0, got {value!r}")


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ArgumentError(f"time_evaluator: {name} must be a positive int, got {value!r}")
