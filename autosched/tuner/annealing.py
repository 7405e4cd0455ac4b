"""Simulated annealing over a space, guided by a score function (a cost model).

Walks move one knob at a time, so they explore configs near good ones without
enumerating the space; every config a walk touches is a candidate, and the
best-scored unmeasured ones are returned.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence, Set

import numpy as np

from autosched.space import ConfigSpace

Score = Callable[[np.ndarray], np.ndarray]


class _Best:
    """The n highest-scored distinct indices offered so far, minus `exclude`."""

    def __init__(self, n: int, exclude: Set[int]) -> None:
        self.n, self.exclude = n, exclude
        self.heap: list[tuple[float, int]] = []
        self.members: set[int] = set()

    def offer(self, indices: np.ndarray, scores: np.ndarray) -> bool:
        changed = False
        for i, s in zip(map(int, indices), scores.tolist()):
            if i in self.exclude or i in self.members:
                continue
            if len(self.heap) < self.n:
                heapq.heappush(self.heap, (s, i))
            elif s > self.heap[0][0]:
                self.members.discard(heapq.heapreplace(self.heap, (s, i))[1])
            else:
                continue
            self.members.add(i)
            changed = True
        return changed

    def ranked(self) -> list[int]:
        return [i for _, i in sorted(self.heap, reverse=True)]


def _neighbors(digits: np.ndarray, radices: np.ndarray, movable: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each row with one movable knob set to another of its values."""
    rows = np.arange(len(digits))
    knob = movable[rng.integers(len(movable), size=len(digits))]
    out = digits.copy()
    out[rows, knob] = (digits[rows, knob] + rng.integers(1, radices[knob])) % radices[knob]
    return out


def anneal(space: ConfigSpace, score: Score, *, n_best: int, rng: np.random.Generator, exclude: Set[int],
           starts: Sequence[int] = (), chains: int = 128, iters: int = 500, patience: int = 50) -> list[int]:
    """Up to `n_best` indices not in `exclude`, best predicted first.

    `chains` walks start at `starts` (e.g. the best measured configs) and random
    points; temperature falls linearly to 0 over `iters` steps, relative to the
    spread of the first scores (model scores have no fixed scale). Stops early
    after `patience` steps that find nothing new for the top list."""
    if n_best <= 0:
        return []
    first = list(dict.fromkeys(starts))[:chains]
    first += space.sample(chains - len(first), rng, exclude=set(first))
    digits = space.decode_many(first)
    indices = space.encode_many(digits)
    current = np.asarray(score(indices), dtype=np.float64)
    best = _Best(n_best, exclude)
    best.offer(indices, current)
    radices = np.asarray(space.radices, dtype=np.int64)
    movable = np.flatnonzero(radices > 1)
    if movable.size == 0 or len(first) == 0:
        return best.ranked()
    scale = float(np.std(current)) or 1.0
    stale = 0
    for step in range(iters):
        temperature = scale * (1.0 - step / iters)
        proposal = _neighbors(digits, radices, movable, rng)
        indices = space.encode_many(proposal)
        scores = np.asarray(score(indices), dtype=np.float64)
        gain = np.minimum(scores - current, 0.0) / temperature
        accept = rng.random(len(scores)) < np.exp(gain)
        digits[accept], current[accept] = proposal[accept], scores[accept]
        stale = 0 if best.offer(indices, scores) else stale + 1
        if stale >= patience:
            break
    return best.ranked()
