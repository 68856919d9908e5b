"""RandomTuner: configs drawn uniformly at random, never the same one twice."""

from __future__ import annotations

from tensorforge.tune.space import ConfigEntity
from tensorforge.tune.tuner.base import Tuner


class RandomTuner(Tuner):
    """Uniform random search without repetition; `seed` makes the order repeatable."""

    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        return self.random_unvisited(batch_size)
