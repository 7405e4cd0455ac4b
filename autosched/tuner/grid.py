"""Grid search: every config in index order, for small spaces and exhaustive baselines."""

from __future__ import annotations

from typing import Any

from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target
from autosched.tuner.base import Tuner


class GridTuner(Tuner):
    name = "grid"

    def __init__(self, task: TaskLike, space: ConfigSpace, target: Target, *, seed: int = 0, **options: Any) -> None:
        super().__init__(task, space, target, seed=seed, **options)
        self._next = 0  # first index not yet proposed

    def _propose(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n and self._next < self.space.size:
            if self._next not in self.visited:
                out.append(self._next)
            self._next += 1
        return out
