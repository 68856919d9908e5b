"""The learned cost model: gradient-boosted trees (xgboost, CPU) ranking configs by throughput.

xgboost is optional (the `tune` extra) and imported only when a model is made.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorforge.tune.template import TuneError


def require_xgboost() -> Any:
    """The xgboost module, or a TuneError saying how to install it."""
    try:
        import xgboost
    except ImportError as e:
        raise TuneError(
            "XGBTuner needs xgboost, which is not installed: pip install 'tensorforge[tune]' "
            "(or pip install xgboost-cpu); RandomTuner and GridSearchTuner work without it"
        ) from e
    return xgboost


class XGBCostModel:
    """Fit on (features, relative throughput) of measured configs; predict a score to rank by.

    The rank:pairwise objective learns the order of configs, not their times, which is all the
    search needs. One thread and a fixed seed: the same data gives the same model.
    """

    def __init__(
        self, seed: int | None = None, num_boost_round: int = 60, objective: str = "rank:pairwise"
    ):
        self.xgb = require_xgboost()
        self.num_boost_round = num_boost_round
        self.params = {
            "objective": objective,
            "max_depth": 6,
            "eta": 0.3,
            "gamma": 1e-4,
            "min_child_weight": 1,
            "subsample": 1.0,
            "lambda": 1.0,
            "alpha": 0.0,
            "nthread": 1,  # NOTE: also keeps OpenMP's thread pool unstarted in forked workers
            "seed": 0 if seed is None else int(seed) % (2**31),
            "verbosity": 0,
        }
        self.booster: Any = None

    def fit(self, xs: np.ndarray, ys: np.ndarray) -> None:
        dtrain = self.xgb.DMatrix(
            np.asarray(xs, dtype=np.float32),
            label=np.asarray(ys, dtype=np.float32),
            missing=np.nan,
            nthread=1,  # else one per core, spinning: 8-50 ms per matrix on a busy machine
        )
        if self.params["objective"].startswith("rank:"):
            dtrain.set_group([len(ys)])
        self.booster = self.xgb.train(self.params, dtrain, num_boost_round=self.num_boost_round)

    @property
    def trained(self) -> bool:
        return self.booster is not None

    def predict(self, xs: np.ndarray) -> np.ndarray:
        if self.booster is None:
            return np.zeros(len(xs))
        dtest = self.xgb.DMatrix(np.asarray(xs, dtype=np.float32), missing=np.nan, nthread=1)
        return self.booster.predict(dtest)
