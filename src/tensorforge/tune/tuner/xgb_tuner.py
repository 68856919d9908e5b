"""XGBTuner: candidates ranked by xgboost models of the lowered IR, plus some pure exploration.

Each batch (`plan_size` configs, like TVM's plan):
1. refit two models on every measured config (features -> throughput relative to the best):
   one on knob values only (cheap to compute for any config), one on knob values plus features
   of the lowered loop IR;
2. draw `n_candidates` unmeasured candidates: uniform random configs, every one-knob
   neighbour of the best measured configs, and random two-knob mutations of them;
3. the knob model shortlists `shortlist` x plan_size of them; worker processes lower those
   (instantiate, lower, walk the IR; cached by config index) and the IR model ranks the list;
4. measure the top of that ranking, plus `epsilon` of the batch drawn uniformly at random.
The first batch, before anything is measured, is `n_warmup` (8) uniform random configs, so the
model ranks candidates from the ninth trial on (not after a whole plan of random ones). Only the shortlist is lowered,
so the tuner's own time stays small next to building and measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from tensorforge.tune.measure import MeasureInput, MeasureResult
from tensorforge.tune.space import ConfigEntity
from tensorforge.tune.template import Task
from tensorforge.tune.tuner.base import Tuner
from tensorforge.tune.tuner.cost_model import XGBCostModel, require_xgboost
from tensorforge.tune.tuner.features import (
    N_IR_FEATURES,
    candidate_ir_features,
    ir_features,
    knob_features,
)
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
        plan_size: int = 32,
        feature_type: str = "ir",
        epsilon: float = 0.05,
        n_candidates: int = 2048,
        shortlist: int = 3,
        num_boost_round: int = 60,
        n_feature_workers: int | None = None,
        feature_timeout: float = 10.0,
        seed: int | None = None,
        n_warmup: int = 8,
    ):
        require_xgboost()
        if feature_type not in ("ir", "knob"):
            raise ValueError(f"XGBTuner: feature_type must be 'ir' or 'knob', got {feature_type!r}")
        super().__init__(task, seed)
        self.batch_size = self.plan_size = int(plan_size)
        self.n_warmup = max(1, int(n_warmup))
        self.feature_type = feature_type
        self.epsilon = float(epsilon)
        self.n_candidates = int(n_candidates)
        self.shortlist = int(shortlist)
        self.n_feature_workers = n_feature_workers or cpu_count()
        self.feature_timeout = feature_timeout
        self.knob_model = XGBCostModel(seed=seed, num_boost_round=num_boost_round)
        self.model = (
            XGBCostModel(seed=seed, num_boost_round=num_boost_round)
            if feature_type == "ir"
            else self.knob_model
        )
        self._features: dict[int, np.ndarray] = {}  # config index -> knob + IR feature vector
        self._broken: set[int] = set()  # candidates whose template or lowering failed
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
            partial(candidate_ir_features, self.task),
            configs,
            self.n_feature_workers,
            self.feature_timeout,
        )
        for config, result in zip(configs, results):
            if isinstance(result, Failure):
                self._broken.add(config.index)
            self._features[config.index] = self._vector(config, result)

    # -- learning ---------------------------------------------------------------------------------------
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        measurer = self._measurer
        reported = measurer.features if measurer is not None else {}
        for inp, res in zip(inputs, results):
            index = inp.config.index
            if index in self._features:
                continue
            if index in reported:  # lowered by its build process
                self._features[index] = self._vector(inp.config, reported.pop(index))
            elif measurer is not None or not res.ok:
                # its build never got as far as lowering (or failed): lowering it again here
                # would only fail (or hang) again; the model sees its knobs alone
                self._features[index] = self._vector(inp.config, None)

    def _fit(self) -> bool:
        """Refit the models if there are new measurements; False while they cannot learn anything."""
        if len(self.history) == self._fitted_on:
            return self.knob_model.trained
        if self.best_result is None:
            return False
        ys = np.array([self.best_cost / r.cost if r.ok else 0.0 for _, r in self.history])
        if len(np.unique(ys)) < 2:
            return self.knob_model.trained
        knobs = np.stack([knob_features(c) for c, _ in self.history])
        self.knob_model.fit(knobs, ys)
        if self.feature_type == "ir":
            self._ensure_features([c.index for c, _ in self.history])
            self.model.fit(np.stack([self._features[c.index] for c, _ in self.history]), ys)
        self._fitted_on = len(self.history)
        return True

    # -- proposing --------------------------------------------------------------------------------------
    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        if not self._fit():  # nothing to learn from yet: a few random configs, then the model
            return self.random_unvisited(min(batch_size, self.n_warmup))
        n_explore = int(round(self.epsilon * batch_size))
        if self.epsilon > 0 and batch_size >= 4:
            n_explore = max(1, n_explore)
        n_model = max(0, batch_size - n_explore)
        candidates = self._candidates()
        picks: list[int] = []
        if candidates and n_model:
            knob_scores = self.knob_model.predict(
                np.stack([knob_features(self.space.get(i)) for i in candidates])
            )
            ranked = [candidates[k] for k in np.argsort(-knob_scores, kind="stable")]
            if self.feature_type == "ir":
                short = ranked[: self.shortlist * n_model]
                self._ensure_features(short)
                short = [i for i in short if i not in self._broken]
                if short:
                    scores = self.model.predict(np.stack([self._features[i] for i in short]))
                    ranked = [short[k] for k in np.argsort(-scores, kind="stable")]
                else:
                    ranked = []
            picks = ranked[:n_model]
        explore = self.random_unvisited(batch_size - len(picks), exclude=set(picks) | self._broken)
        return [self.space.get(i) for i in picks] + explore

    def _candidates(self) -> list[int]:
        """Unmeasured configs to score: neighbours of the best measured ones, and random ones."""
        ranked = sorted((r.cost, c.index) for c, r in self.history if r.ok)
        parents = [index for _, index in ranked[:8]]
        dims = self.space.dims
        out: dict[int, None] = {}
        taken = self.visited | self._broken
        for parent in parents:  # every one-knob neighbour
            choices = self.space.choices_of(parent)
            for knob, size in enumerate(dims):
                for value in range(size):
                    if value != choices[knob]:
                        neighbour = choices.copy()
                        neighbour[knob] = value
                        out[self.space.index_of(neighbour)] = None
        mutable = [k for k, d in enumerate(dims) if d > 1]
        for _ in range(len(parents) * 64 if mutable else 0):  # two-knob mutations
            choices = self.space.choices_of(parents[int(self.rng.integers(len(parents)))])
            for _ in range(2):
                knob = mutable[int(self.rng.integers(len(mutable)))]
                choices[knob] = int(self.rng.integers(dims[knob]))
            out[self.space.index_of(choices)] = None
        candidates = [i for i in out if i not in taken]
        randoms = self.random_unvisited(
            max(0, self.n_candidates - len(candidates)), exclude=set(out) | self._broken
        )
        return candidates + [c.index for c in randoms]
