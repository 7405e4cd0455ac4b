"""Random search without replacement: the baseline every strategy must beat."""

from __future__ import annotations

from autosched.tuner.base import Tuner


class RandomTuner(Tuner):
    name = "random"

    def _propose(self, n: int) -> list[int]:
        return self.space.sample(n, self.rng, exclude=self.visited)
