"""Tuning logs: one JSON object per measured trial, and `apply_history_best` over them.

A record (schema version 1):

    {"v": 1, "template": "example/matmul", "args": [512, 512, 512, "float32"],
     "workload_hash": "<sha256 of the computation>", "target": "llvm -mcpu=... -mattr=...",
     "flop": 268435456.0, "config": {"index": 1234, "knobs": {"tile_y": [64, 8], ...}},
     "result": {"costs": [...], "error_no": 0, "error_msg": "", "all_cost": ..., "timestamp": ...}}

A record applies only where template, arguments, computation hash and the full target string all
agree: a log from another machine (another CPU model or feature set) is never applied.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tensorforge.tune.measure import MeasureErrorNo, MeasureInput, MeasureResult
from tensorforge.tune.space import ConfigEntity, ConfigSpace
from tensorforge.tune.template import DispatchContext, WorkloadKey

SCHEMA_VERSION = 1
logger = logging.getLogger("tensorforge.tune")


@dataclass(frozen=True)
class Record:
    """One logged trial."""

    template: str
    args: list
    workload_hash: str
    target: str
    flop: float
    config: dict  # {"index": i, "knobs": {...}}
    result: MeasureResult

    @property
    def key(self) -> WorkloadKey:
        args = json.dumps(self.args, sort_keys=True, separators=(",", ":"))
        return WorkloadKey(self.template, args, self.workload_hash, self.target)

    @property
    def cost(self) -> float:
        return self.result.cost

    @property
    def gflops(self) -> float:
        return self.flop / self.cost / 1e9 if self.result.ok and self.flop else 0.0

    def to_json(self) -> dict:
        return {
            "v": SCHEMA_VERSION,
            "template": self.template,
            "args": self.args,
            "workload_hash": self.workload_hash,
            "target": self.target,
            "flop": self.flop,
            "config": self.config,
            "result": self.result.to_json(),
        }


# No kernel call returns in under a nanosecond (a call alone costs more), and no target does more
# than these FLOP/s (the largest CPUs reach tens of TFLOP/s, the largest GPUs a few PFLOP/s).
MIN_SECONDS = 1e-9
PEAK_FLOPS = {"llvm": 1e14, "cuda": 1e16}


def implausible(result: MeasureResult, flop: float, target: str) -> str | None:
    """Why a successful measurement cannot be real (a broken timer, a kernel that did nothing
    measurable), or None. Such a measurement is recorded as an error, never taken as the best."""
    if not result.ok:
        return None
    seconds = min(result.costs)
    if not math.isfinite(seconds) or seconds < MIN_SECONDS:
        return f"impossible measurement: {seconds:.3g} s per call (the floor is {MIN_SECONDS:g} s)"
    peak = PEAK_FLOPS.get(target.split()[0] if target else "", max(PEAK_FLOPS.values()))
    if flop and flop / seconds > peak:
        return (
            f"impossible measurement: {seconds:.3g} s per call is {flop / seconds / 1e9:.3g} "
            f"GFLOP/s, beyond any {target.split()[0] if target else 'target'}'s peak "
            f"({peak / 1e9:.3g} GFLOP/s)"
        )
    return None


def screened(result: MeasureResult, flop: float, target: str) -> MeasureResult:
    """`result`, or a RUNTIME_ERROR saying why if its timing is impossible (see `implausible`)."""
    reason = implausible(result, flop, target)
    if reason is None:
        return result
    return dataclasses.replace(result, error_no=int(MeasureErrorNo.RUNTIME_ERROR), error_msg=reason)


def make_record(inp: MeasureInput, result: MeasureResult) -> Record:
    task = inp.task
    return Record(
        template=task.name,
        args=json.loads(task.args_json),
        workload_hash=task.workload_hash,
        target=task.target,
        flop=float(task.flop),
        config=inp.config.to_json(),
        result=result,
    )


def encode(inp: MeasureInput, result: MeasureResult) -> str:
    """One log line (no newline) for a measured trial."""
    return json.dumps(make_record(inp, result).to_json(), separators=(",", ":"))


def decode(line: str) -> Record:
    """A Record from one log line; raises ValueError for anything that is not a valid record."""
    data = json.loads(line)
    if not isinstance(data, dict) or data.get("v") != SCHEMA_VERSION:
        raise ValueError(f"not a version-{SCHEMA_VERSION} tuning record")
    try:
        return Record(
            template=str(data["template"]),
            args=list(data["args"]),
            workload_hash=str(data["workload_hash"]),
            target=str(data["target"]),
            flop=float(data.get("flop", 0.0)),
            config=dict(data["config"]),
            result=MeasureResult.from_json(data["result"]),
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed tuning record: {e}") from None


def load_records(path: str | os.PathLike) -> list[Record]:
    """Every record in a log. A truncated last line (a killed run) is skipped silently; any other
    unreadable line is skipped with a warning."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    records = []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(decode(line))
        except ValueError as e:
            if number == last:
                logger.info("%s: skipping a truncated last line", path)
            else:
                warnings.warn(
                    f"{path}:{number + 1}: skipping an unreadable line ({e})", stacklevel=2
                )
    return records


def append_line(handle: Any, line: str) -> None:
    """Write one record line durably: flushed and fsync'ed before returning."""
    handle.write(line + "\n")
    handle.flush()
    os.fsync(handle.fileno())


def open_log(path: str | os.PathLike) -> Any:
    """Open a log for appending. A killed run may have left half a record as the last line:
    it cannot be read back, so it is cut off and the next record starts on its own line."""
    with open(path, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size > 0:
            handle.seek(max(0, size - 65536))
            tail = handle.read()
            if not tail.endswith(b"\n"):
                cut = tail.rfind(b"\n")
                if cut >= 0 or size == len(tail):
                    keep = size - len(tail) + cut + 1  # just after the last newline (or 0)
                    logger.info(
                        "%s: removing a truncated last record (%d bytes)", path, size - keep
                    )
                    handle.truncate(keep)
                else:  # a last line longer than we look back: end it rather than cut it
                    handle.write(b"\n")
    return open(path, "a", encoding="utf-8")


def best_by_workload(records: Iterable[Record]) -> dict[WorkloadKey, Record]:
    """The fastest successful record of each workload key (impossible timings never count).

    Where a run re-measured its top candidates side by side (records marked `confirmed`), the
    best is chosen among those: a single lucky measurement does not win over them.
    """
    best: dict[WorkloadKey, tuple[bool, Record]] = {}
    for rec in records:
        if not rec.result.ok or implausible(rec.result, rec.flop, rec.target) is not None:
            continue
        key = rec.key
        confirmed = bool(rec.result.meta.get("confirmed"))
        rank = (not confirmed, rec.cost)
        if key not in best or rank < (not best[key][0], best[key][1].cost):
            best[key] = (confirmed, rec)
    return {key: rec for key, (_, rec) in best.items()}


def _records_from(source: Any) -> Iterator[Record]:
    if isinstance(source, (str, os.PathLike)):
        yield from load_records(source)
    else:
        for item in source:
            if isinstance(item, Record):
                yield item
            elif isinstance(item, (str, os.PathLike)):
                yield from load_records(item)
            else:
                raise TypeError(f"apply_history_best: expected a log path or Records, got {item!r}")


class ApplyHistoryBest(DispatchContext):
    """Inside this context a template called directly gets the best logged config for its workload.

    Where the log has none (another target string, other arguments, a changed computation), the
    template uses its default config and the context says so once per workload, as a warning and
    in the "tensorforge.tune" logger. `applied` and `missed` list what happened.
    """

    def __init__(self, source: Any):
        self.best = best_by_workload(_records_from(source))
        self.applied: list[tuple[WorkloadKey, Record]] = []
        self.missed: list[WorkloadKey] = []

    def query(self, key: WorkloadKey, space: ConfigSpace) -> ConfigEntity | None:
        record = self.best.get(key)
        config = space.from_json(record.config) if record is not None else None
        if config is not None:
            self.applied.append((key, record))
            return config
        if key not in self.missed:
            self.missed.append(key)
            message = self._miss_reason(key, record)
            warnings.warn(message, stacklevel=4)
            logger.warning(message)
        return None

    def _miss_reason(self, key: WorkloadKey, record: Record | None) -> str:
        what = f"template {key.template!r} with args {key.args}"
        if record is not None:
            return f"apply_history_best: the best logged config of {what} no longer fits its space; using the default config"
        same = [k for k in self.best if k.template == key.template and k.args == key.args]
        if any(k.workload_hash == key.workload_hash and k.target != key.target for k in same):
            others = sorted(
                {_short_target(k.target, key.target) for k in same if k.target != key.target}
            )
            reason = (
                f"the log was tuned for another target ({'; '.join(others)}), "
                f"not for this one ({_short_target(key.target, '')})"
            )
        elif same:
            reason = "the computation changed since it was tuned (its hash differs)"
        else:
            reason = "the log has no record for it"
        return f"apply_history_best: no tuned config for {what}: {reason}; using the default config"


def _short_target(target: str, other: str) -> str:
    """A target string without its long feature list, noting when only the features differ."""
    head = target.split(" -mattr=")[0]
    if other and head == other.split(" -mattr=")[0]:
        return f"{head} with other CPU features"
    return head


def apply_history_best(source: Any) -> ApplyHistoryBest:
    """`with tune.apply_history_best("log.jsonl"):` dispatch the best logged configs (API.md §4)."""
    return ApplyHistoryBest(source)


def best_cost(records: Iterable[Record]) -> float:
    costs = [
        r.cost for r in records if r.result.ok and implausible(r.result, r.flop, r.target) is None
    ]
    return min(costs) if costs else math.inf
