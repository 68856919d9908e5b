"""XGBTuner: candidates ranked by an xgboost model of the lowered IR, plus some pure exploration.

Each batch (`plan_size` configs, like TVM's plan):
1. refit the model on every measured config (features -> throughput relative to the best);
2. keep a pool of `pool_size` unmeasured candidates: those left from earlier batches, minus the
   worst-scored `plan_size`, topped up with mutations of the best measured configs (one or two
   knobs changed) and uniform random configs; only new candidates need features, which worker
   processes extract (instantiate, lower, walk the IR) and the tuner caches by config index;
3. measure the pool's top scores, plus `epsilon` of the batch drawn uniformly at random.
The first batch, before anything is measured, is uniform random.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np

from tensorforge.tune.measure import MeasureInput, MeasureResult
from tensorforge.tune.space import ConfigEntity
from tensorforge.tune.template import Task
from tensorforge.tune.tuner.base import Tuner
from tensorforge.tune.tuner.cost_model import XGBCostModel, require_xgboost
from tensorforge.tune.tuner.features import N_IR_FEATURES, candidate_ir_features, ir_features, knob_features
from tensorforge.tune.workers import Failure, cpu_count, fork_map


class XGBTuner(Tuner):
    """Random candidates scored by a gradient-boosted-tree cost model (API.md §4).

    feature_type: "ir" (lowered loop IR plus knobs, the default) or "knob" (knob values only,
    no lowering in the tuner). `seed` fixes sampling and the model, so a run repeats exactly
    given the same measurements.
    """

    def __init__(
        self,
        task: Task,
        plan_size: int = 64,
        feature_type: str = "ir",
        epsilon: float = 0.05,
        pool_size: int = 512,
        num_boost_round: int = 60,
        n_feature_workers: int | None = None,
        feature_timeout: float = 10.0,
        seed: int | None = None,
    ):
        require_xgboost()
        if feature_type not in ("ir", "knob"):
            raise ValueError(f"XGBTuner: feature_type must be 'ir' or 'knob', got {feature_type!r}")
        super().__init__(task, seed)
        self.batch_size = self.plan_size = int(plan_size)
        self.feature_type = feature_type
        self.epsilon = float(epsilon)
        self.pool_size = int(pool_size)
        self.n_feature_workers = n_feature_workers or cpu_count()
        self.feature_timeout = feature_timeout
        self.model = XGBCostModel(seed=seed, num_boost_round=num_boost_round)
        self._features: dict[int, np.ndarray] = {}  # config index -> feature vector
        self._broken: set[int] = set()  # candidates whose template or lowering failed
        self._pool: list[int] = []
        self._pool_scores: dict[int, float] = {}
        self._fitted_on = 0

    def feature_fn(self) -> Callable[[Any], Any] | None:
        return ir_features if self.feature_type == "ir" else None

    # -- features -------------------------------------------------------------------------------------
    def _vector(self, config: ConfigEntity, ir: Any) -> np.ndarray:
        knobs = knob_features(config)
        if self.feature_type == "knob":
            return knobs
        if ir is None or isinstance(ir, Failure):
            ir = np.full(N_IR_FEATURES, np.nan)
        return np.concatenate([knobs, np.asarray(ir, dtype=np.float64)])

    def _ensure_features(self, indices: Sequence[int]) -> None:
        """Compute and cache the features of configs that have none yet (in worker processes)."""
        missing = [i for i in dict.fromkeys(indices) if i not in self._features]
        if not missing:
            return
        configs = [self.space.get(i) for i in missing]
        if self.feature_type == "knob":
            for config in configs:
                self._features[config.index] = self._vector(config, None)
            return
        results = fork_map(
            partial(candidate_ir_features, self.task), configs, self.n_feature_workers, self.feature_timeout
        )
        for config, result in zip(configs, results):
            if isinstance(result, Failure):
                self._broken.add(config.index)
            self._features[config.index] = self._vector(config, result)

    # -- learning ---------------------------------------------------------------------------------------
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        measured = getattr(self, "_measurer", None)
        reported = measured.features if measured is not None else {}
        for inp in inputs:
            index = inp.config.index
            if index not in self._features and index in reported:
                self._features[index] = self._vector(inp.config, reported.pop(index))

    def _training_set(self) -> tuple[np.ndarray, np.ndarray]:
        self._ensure_features([c.index for c, _ in self.history])
        xs = np.stack([self._features[c.index] for c, _ in self.history])
        best = self.best_cost
        ys = np.array([best / r.cost if r.ok else 0.0 for _, r in self.history])
        return xs, ys

    def _fit(self) -> bool:
        """Refit the model if there are new measurements; False while it cannot learn anything."""
        if len(self.history) == self._fitted_on:
            return self.model.trained
        if self.best_result is None:
            return False
        xs, ys = self._training_set()
        if len(np.unique(ys)) < 2:
            return self.model.trained
        self.model.fit(xs, ys)
        self._fitted_on = len(self.history)
        return True

    # -- proposing --------------------------------------------------------------------------------------
    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        if not self._fit():
            return self.random_unvisited(batch_size)
        self._refill_pool()
        candidates = [i for i in self._pool if i not in self.visited]
        if candidates:
            scores = self.model.predict(np.stack([self._features[i] for i in candidates]))
            self._pool_scores = dict(zip(candidates, (float(s) for s in scores)))
            order = np.argsort(-scores, kind="stable")
        else:
            order = np.array([], dtype=int)
        n_explore = int(round(self.epsilon * batch_size))
        if self.epsilon > 0 and batch_size >= 4:
            n_explore = max(1, n_explore)
        picks = [candidates[k] for k in order[: max(0, batch_size - n_explore)]]
        chosen = set(picks)
        explore = self.random_unvisited(batch_size - len(picks), exclude=chosen)
        return [self.space.get(i) for i in picks] + explore

    def _refill_pool(self) -> None:
        pool = [i for i in self._pool if i not in self.visited and i not in self._broken]
        if len(pool) >= self.pool_size - self.plan_size and self._pool_scores:
            # make room: drop the worst-scored candidates of the last round
            pool.sort(key=lambda i: self._pool_scores.get(i, -math.inf), reverse=True)
            pool = pool[: max(0, self.pool_size - self.plan_size)]
            pool.sort()  # deterministic order, independent of the scores' ties
        in_pool = set(pool)
        need = self.pool_size - len(pool)
        new = self._mutations(need // 2, in_pool)
        in_pool.update(new)
        new += [c.index for c in self.random_unvisited(need - len(new), exclude=in_pool)]
        self._ensure_features(new)
        self._pool = pool + [i for i in new if i not in self._broken]

    def _mutations(self, n: int, exclude: set[int]) -> list[int]:
        """Up to `n` unvisited neighbours (one or two knobs changed) of the best measured configs."""
        ranked = sorted((r.cost, c.index) for c, r in self.history if r.ok)
        parents = [index for _, index in ranked[:8]]
        if not parents or n <= 0:
            return []
        dims = self.space.dims
        mutable = [k for k, d in enumerate(dims) if d > 1]
        if not mutable:
            return []
        out: list[int] = []
        taken = self.visited | exclude
        for _ in range(20 * n):
            if len(out) >= n:
                break
            parent = parents[int(self.rng.integers(len(parents)))]
            choices = self.space.choices_of(parent)
            for _ in range(1 + int(self.rng.integers(2))):
                knob = mutable[int(self.rng.integers(len(mutable)))]
                choices[knob] = int(self.rng.integers(dims[knob]))
            index = self.space.index_of(choices)
            if index not in taken:
                taken.add(index)
                out.append(index)
        return out
