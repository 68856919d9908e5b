"""The analytic prior: a score for a candidate's decisions before anything is measured.

The search starts with no measurement for its cost models to learn from. Ansor and MetaSchedule
start from random samples (MetaSchedule with a pre-trained model); here random samples are
ranked by what the analytic model of the target (analytic.Machine) says of their decisions,
without lowering them: a register tile of a tiled stage (its innermost tile factors) that fits
the vector registers and does many FMAs per load scores high, one that spills, leaves vector
lanes idle or is not unrolled scores low; a vectorized loop a whole number of vectors wide
scores higher than one with a masked tail. The score is a ranking aid, not a time: the cold
search measures the best-scored of many random samples first, and the cost models take it as
one more feature (so they rank by it until measurements say otherwise).
"""

from __future__ import annotations

import math
from typing import Any

from tensorforge.tune.auto.analytic import FMAS_IN_FLIGHT, Machine, _row_axis

SPILL = 0.02  # a register tile needing more registers than there are
NOT_UNROLLED = 0.3  # an innermost non-vector factor > 16: the sketch leaves it a loop
WIDE_PANEL = 0.8  # the k block's panel of the vector operand past half of L2


class Prior:
    """Scores ScheduleTraces of one task by their decisions (higher: better expected)."""

    def __init__(self, task: Any):
        self.task = task
        self.machine = Machine.of(task.target_obj)
        self._stages: dict[str, tuple[int | None, int]] = {}  # stage key -> (row axis, lanes)
        self._cache: dict[int, float] = {}  # trace index -> score

    def score(self, trace: Any) -> float:
        cached = self._cache.get(trace.index)
        if cached is None:
            cached = self._cache[trace.index] = self.score_decisions(trace.decisions)
        return cached

    def score_decisions(self, decisions: dict) -> float:
        """The geometric mean of the scores of each tiled stage and vectorized loop (1: no
        opinion)."""
        if self.machine.gpu:
            return 1.0
        logs = []
        for key, value in decisions.items():
            kind, stage = key.split(":", 1)
            if kind == "tile" and _is_tiles(value) and len(value[0]) == 3:
                k_tiles = decisions.get(f"rtile:{stage}")
                logs.append(math.log(self.tile_score(stage, value, k_tiles)))
            elif kind == "vec" and _is_tiles(value):
                logs.append(math.log(self.vector_score(stage, value[0][0])))
        return math.exp(sum(logs) / len(logs)) if logs else 1.0

    def tile_score(self, stage: str, tiles: list, k_tiles: Any) -> float:
        """The register tile's (innermost factors): FMAs per load and in flight, as the
        analytic first guess scores its candidates, less for spills, idle lanes, loops."""
        row, lanes = self._stage(stage)
        nr = tiles[-1][-1]
        rows = math.prod(t[-1] for t in tiles[:-1])
        v = -(-nr // lanes)
        flops_per_load = rows * v / (rows + v)
        score = flops_per_load * min(1.0, rows * v / FMAS_IN_FLIGHT)
        if rows * v + v + 1 > self.machine.registers - 1:
            score *= SPILL
        if any(t[-1] > 16 for t in tiles[:-1]):
            score *= NOT_UNROLLED
        if row is None and rows > 1:  # rows along an axis the vector operand varies on too
            score *= 0.5
        score *= nr / (v * lanes)  # lanes left idle in the last vector
        if isinstance(k_tiles, list) and k_tiles and _is_tiles(k_tiles):
            k_block = math.prod(t[0] for t in k_tiles)
            if k_block * nr * 4 > self.machine.l2 // 2:
                score *= WIDE_PANEL
        return max(score, 1e-3)

    def vector_score(self, stage: str, width: int) -> float:
        _, lanes = self._stage(stage)
        if width < lanes:
            return max(width / lanes, 1e-3)
        return 1.0 if width % lanes == 0 else 0.85

    def _stage(self, stage: str) -> tuple[int | None, int]:
        if stage not in self._stages:
            s, _ = self.task.fresh()
            op = s.stages[int(stage.split(".", 1)[0])].op
            lanes = self.task.target_obj.vector_lanes(op.output(0).dtype)
            row = _row_axis(op) if getattr(op, "axis", None) else None
            self._stages[stage] = (row, lanes)
        return self._stages[stage]


def _is_tiles(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(f, list) and f and all(isinstance(x, int) for x in f) for f in value)
    )
