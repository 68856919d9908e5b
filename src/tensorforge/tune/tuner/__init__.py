"""Tuners: random, grid, and XGBoost-model-guided search over a task's config space."""

from tensorforge.tune.tuner.base import Tuner
from tensorforge.tune.tuner.grid_tuner import GridSearchTuner
from tensorforge.tune.tuner.random_tuner import RandomTuner
from tensorforge.tune.tuner.xgb_tuner import XGBTuner

__all__ = ["GridSearchTuner", "RandomTuner", "Tuner", "XGBTuner"]


def __getattr__(name: str):
    from tensorforge.tvm_names import TUNER, missing

    raise missing("tensorforge.tune.tuner", name, TUNER, globals())
