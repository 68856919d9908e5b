"""GridSearchTuner: every config in index order."""

from __future__ import annotations

from tensorforge.tune.space import ConfigEntity
from tensorforge.tune.template import Task
from tensorforge.tune.tuner.base import Tuner


class GridSearchTuner(Tuner):
    """Visits configs 0, 1, 2, ... skipping those already measured."""

    def __init__(self, task: Task, seed: int | None = None):
        super().__init__(task, seed)
        self.counter = 0

    def next_batch(self, batch_size: int) -> list[ConfigEntity]:
        batch = []
        while len(batch) < batch_size and self.counter < len(self.space):
            if self.counter not in self.visited:
                batch.append(self.space.get(self.counter))
            self.counter += 1
        return batch
