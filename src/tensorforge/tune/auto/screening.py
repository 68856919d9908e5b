"""Lowering candidates in their build processes, so the search's parent process only ranks.

A cold-start search ranks a shortlist of candidates by the IR model, which needs each one's
lowered IR (its features, and its hash to drop duplicates). Lowered in the parent, that took
~0.02-0.1 s a candidate in Python, a quarter of the wall time at GEMM 256³. Here each shortlisted
candidate gets its measurement process at once: the process lowers it, reports the IR's hash and
features, and waits. The parent ranks the reports; the processes of the chosen candidates go on
to compile (from the IR they lowered: nothing is lowered twice) and to be timed as usual; the
others are ended. A candidate whose lowering raises, crashes or hangs is reported as None and
ends alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing.connection
import os
import time
from collections.abc import Sequence
from typing import Any

from tensorforge.target import Target
from tensorforge.tune.measure import (
    Measurer,
    MeasureResult,
    _Candidate,
    _candidate_main,
    instantiate,
)
from tensorforge.tune.workers import close_parent, kill, pipe, start_process


def ir_hash(func: Any) -> str:
    return hashlib.sha256(str(func).encode()).hexdigest()


def build_report(func: Any) -> tuple[str, Any]:
    """What each candidate's build reports: its lowered IR's hash and features."""
    from tensorforge.tune.tuner.features import ir_features

    try:
        feats = ir_features(func)
    except Exception:  # noqa: BLE001 - features are optional
        feats = None
    return ir_hash(func), feats


def lower_candidate(task: Any, config: Any) -> Any:
    """The lowered IR of `config`, as its build lowers it."""
    import tensorforge as tf

    s, tensors = instantiate(task, config)
    with Target(task.target):
        return tf.lower(s, tensors, name="main")


def _screen_main(
    conn: Any, task: Any, config: Any, option: Any, feature_fn: Any, reference: Any
) -> None:
    """Lower, report (hash, features), wait; on "build", the usual candidate's life."""
    os.environ["TENSORFORGE_CACHE"] = "0"
    try:
        try:
            func = lower_candidate(task, config)
            report = build_report(func)
        except Exception:  # noqa: BLE001 - reported as unscreened; the search drops it
            conn.send(("unscreened",))
            conn.close()
            return
        conn.send(("screened", *report))
        if conn.recv() != "build":
            conn.close()
            return
    except (EOFError, BrokenPipeError):  # the parent went away
        return
    if option.builder is None:

        def from_lowered(task: Any, config: Any, feature_fn: Any) -> tuple[Any, Any]:
            import tensorforge as tf

            with Target(task.target):
                return tf.build(func, target=task.target, name="main"), report

        option = dataclasses.replace(option, builder=from_lowered)
    _candidate_main(conn, task, config, option, feature_fn, reference)


class ScreeningMeasurer(Measurer):
    """A Measurer whose `screen` lowers candidates in processes that `measure` then reuses."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._screened: dict[int, _Candidate] = {}  # config index -> its waiting process
        self.time_screen = 0.0  # wall seconds spent in screen()
        self.n_screened = 0  # configs lowered by screen() ...
        self.n_dropped = 0  # ... and of those, ended without being measured

    def screen(self, configs: Sequence[Any]) -> dict[int, tuple[str, Any] | None]:
        """Lower each config in its own process, `n_parallel` at once: config index ->
        (IR hash, IR features), or None where lowering failed, crashed or timed out."""
        started = time.perf_counter()
        out = {
            c.index: self._screened[c.index].features for c in configs if c.index in self._screened
        }
        queue = [c for c in configs if c.index not in out]
        self.n_screened += len(queue)
        active: list[_Candidate] = []
        try:
            while queue or active:
                while queue and len(active) < self.option.n_parallel:
                    active.append(self._launch(queue.pop(0)))
                wait_for = max(0.0, min(c.deadline for c in active) - time.monotonic())
                multiprocessing.connection.wait([c.conn for c in active], timeout=wait_for)
                for cand in list(active):
                    if self._collect(cand, out):
                        active.remove(cand)
        finally:  # Ctrl-C, or any error here: no process is left lowering
            for cand in active:
                self._end(cand)
        self.time_screen += time.perf_counter() - started
        return out

    def _launch(self, config: Any) -> _Candidate:
        cand = _Candidate(-1, config)
        parent, child = pipe(duplex=True)
        cand.start = time.perf_counter()
        cand.deadline = time.monotonic() + self.option.timeout
        cand.proc = start_process(
            _screen_main,
            (child, self.task, config, self.option, self.feature_fn, self._reference),
            self.method,
        )
        child.close()
        cand.conn = parent
        return cand

    def _collect(self, cand: _Candidate, out: dict) -> bool:
        """Take `cand`'s report into `out` if it has one or never will; True if done."""
        message = None
        try:
            if cand.conn.poll():
                message = cand.conn.recv()
            elif time.monotonic() <= cand.deadline:
                return False
        except (EOFError, OSError):
            pass
        if message is not None and message[0] == "screened":
            cand.features = out[cand.config.index] = (message[1], message[2])
            self._screened[cand.config.index] = cand
        else:  # failed, crashed or timed out: ends alone
            out[cand.config.index] = None
            self._end(cand)
            self.n_dropped += 1
        return True

    def drop(self, keep: Sequence[Any] = ()) -> None:
        """End the waiting processes of screened configs not in `keep`."""
        kept = {c.index for c in keep}
        for index in [i for i in self._screened if i not in kept]:
            self._end(self._screened.pop(index))
            self.n_dropped += 1

    def measure(self, configs: Sequence[Any], on_result: Any = None) -> list[MeasureResult]:
        self.drop(configs)
        try:
            return super().measure(configs, on_result)
        finally:
            self.drop()

    def close(self) -> None:
        self.drop()

    def _candidate(self, position: int, config: Any) -> _Candidate:
        cand = self._screened.pop(config.index, None)
        if cand is None:
            return _Candidate(position, config)
        cand.position = position
        return cand

    def _start(self, cand: _Candidate) -> None:
        if cand.proc is None:
            super()._start(cand)
            return
        cand.start = time.perf_counter()
        cand.deadline = time.monotonic() + self.option.timeout
        try:
            cand.conn.send("build")
        except OSError:  # it died waiting: _build reads the EOF and records the crash
            pass

    @staticmethod
    def _end(cand: _Candidate) -> None:
        if cand.proc is not None:
            kill(cand.proc)
            close_parent(cand.conn)
            cand.proc = None
