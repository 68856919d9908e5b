"""Tuner callbacks: `log_to_file` (durable JSON lines) and `progress_bar` (best GFLOP/s so far).

A callback is called as `callback(tuner, inputs, results)` each time measurements complete (the
tuner calls it once per measured trial, so a killed run loses nothing already measured), and
`callback.close()` (where it has one) when `tuner.tune` returns.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from tensorforge.tune.measure import MeasureInput, MeasureResult
from tensorforge.tune.records import append_line, encode, open_log


class LogToFile:
    """Append one record per trial to a JSON-lines log, flushed and fsync'ed as it is measured."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._handle: Any = None

    def __call__(
        self, tuner: Any, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]
    ) -> None:
        if self._handle is None:
            self._handle = open_log(self.path)
        for inp, res in zip(inputs, results):
            append_line(self._handle, encode(inp, res))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def log_to_file(path: str | os.PathLike) -> LogToFile:
    """A callback that appends every measured trial to the log at `path` (API.md §4)."""
    return LogToFile(path)


class ProgressBar:
    """A live line: trials done of the total, best GFLOP/s (or best time) so far, errors."""

    def __init__(
        self,
        total: int | None = None,
        prefix: str = "",
        stream: Any = None,
        use_tqdm: bool | None = None,
    ):
        self.total = total
        self.prefix = prefix
        self.stream = stream or sys.stderr
        self.use_tqdm = use_tqdm
        self._bar: Any = None
        self._plain_started = False
        self.count = 0
        self.errors = 0
        self.best_cost = math.inf
        self.start = time.perf_counter()

    def __call__(
        self, tuner: Any, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]
    ) -> None:
        total = self.total or getattr(tuner, "n_trial", None)
        flop = inputs[0].task.flop if inputs else 0.0
        for res in results:
            self.count += 1
            if res.ok:
                self.best_cost = min(self.best_cost, res.cost)
            else:
                self.errors += 1
        status = self._status(flop)
        bar = self._tqdm(total)
        if bar is not None:
            bar.update(len(results))
            bar.set_postfix_str(status, refresh=True)
        else:
            done = f"{self.count}/{total}" if total else f"{self.count}"
            elapsed = time.perf_counter() - self.start
            self.stream.write(f"\r{self.prefix}[{done}] {status} ({elapsed:.0f} s)  ")
            self.stream.flush()
            self._plain_started = True

    def _status(self, flop: float) -> str:
        if math.isinf(self.best_cost):
            best = "best: none yet"
        elif flop:
            best = f"best {flop / self.best_cost / 1e9:.2f} GFLOP/s"
        else:
            best = f"best {self.best_cost * 1e3:.3f} ms"
        return f"{best}, errors {self.errors}"

    def _tqdm(self, total: int | None) -> Any:
        if self._bar is not None or self.use_tqdm is False:
            return self._bar
        try:
            from tqdm import tqdm
        except ImportError:
            self.use_tqdm = False
            return None
        self._bar = tqdm(
            total=total, desc=self.prefix.strip() or "tuning", unit="trial", file=self.stream
        )
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain_started:
            self.stream.write("\n")
            self.stream.flush()
            self._plain_started = False


def progress_bar(total: int | None = None, prefix: str = "", stream: Any = None) -> ProgressBar:
    """A callback showing a live bar with the best GFLOP/s so far (tqdm if installed, else one
    carriage-returned line). `total` defaults to the tuner's `n_trial`."""
    return ProgressBar(total, prefix, stream)
