"""The cost-model interface and the shared feature/target plumbing.

A cost model ranks candidate configs of one task (bound at construction) so a
tuner measures the promising ones first. Training targets are throughputs
normalized per task (best config = 1, failures = 0): tasks of different sizes
then share one scale, and a failed config ranks below every working one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from autosched.measure import MeasureResult, Record, TaskLike
from autosched.space import ConfigSpace
from cost_models.features import FeatureExtractor


class CostModel(ABC):
    """Scores configs of its task; higher means predicted faster."""

    @abstractmethod
    def fit(self, records: Sequence[Record], transfer: Sequence[Record] = ()) -> None:
        """Retrain from this task's `records` plus `transfer` records of other tasks
        of the same template (each with its own task and space)."""

    @abstractmethod
    def predict(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """One score per config index of the bound space."""


def throughput_targets(results: Sequence[MeasureResult]) -> np.ndarray:
    """best cost / cost for each result of one task; 0 for failures."""
    costs = np.array([r.cost if r.ok else np.inf for r in results], dtype=np.float64)
    ok = np.isfinite(costs)
    if not ok.any():
        return np.zeros(len(costs))
    return np.where(ok, costs[ok].min() / costs, 0.0)


class FeatureModel(CostModel):
    """A cost model over feature rows: subclasses supply `_train` and `_score`.

    Rows are cached per (task key, space) by config index and aligned by column
    name to the bound space's columns, so records of other spaces can train it."""

    def __init__(self, task: TaskLike, space: ConfigSpace, features: FeatureExtractor,
                 cache_rows: int = 1 << 18) -> None:
        self.task = task
        self.space = space
        self.features = features
        self.columns = features.names(task, space)
        self._cache_rows = cache_rows
        self._cache: dict[tuple[str, str], dict[int, np.ndarray]] = {}
        self._fitted = False

    @abstractmethod
    def _train(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        """Fit rows `x` to targets `y`; `groups` numbers the task each row is from."""

    @abstractmethod
    def _score(self, x: np.ndarray) -> np.ndarray: ...

    def _aligned(self, task: TaskLike, space: ConfigSpace, indices: np.ndarray) -> np.ndarray:
        x = self.features.extract(task, space, indices)
        if space == self.space:
            return x
        position = {n: j for j, n in enumerate(self.features.names(task, space))}
        out = np.zeros((len(x), len(self.columns)), dtype=np.float32)
        for j, name in enumerate(self.columns):
            if name in position:
                out[:, j] = x[:, position[name]]
        return out

    def rows(self, task: TaskLike, space: ConfigSpace, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Feature rows in the bound space's columns, cached by config index.
        The cache is dropped when full: rows are cheap to recompute, memory is not."""
        cache = self._cache.setdefault((task.key, space.fingerprint), {})
        keys = [int(i) for i in indices]
        missing = list(dict.fromkeys(i for i in keys if i not in cache))
        fresh = dict(zip(missing, self._aligned(task, space, np.array(missing, dtype=object)))) if missing else {}
        if not keys:
            return np.zeros((0, len(self.columns)), dtype=np.float32)
        out = np.stack([fresh[i] if i in fresh else cache[i] for i in keys])
        if len(cache) + len(fresh) > self._cache_rows:
            cache.clear()
        cache.update(fresh)
        return out

    def fit(self, records: Sequence[Record], transfer: Sequence[Record] = ()) -> None:
        groups: dict[tuple[str, str], list[Record]] = {}
        for rec in list(records) + list(transfer):
            inp = rec[0]
            groups.setdefault((inp.task.key, inp.config.space.fingerprint), []).append(rec)
        if not groups:
            raise ValueError("cost model needs at least one record to fit")
        xs, ys, gs = [], [], []
        for g, recs in enumerate(groups.values()):
            inp0 = recs[0][0]
            xs.append(self.rows(inp0.task, inp0.config.space, [inp.config.index for inp, _ in recs]))
            ys.append(throughput_targets([res for _, res in recs]))
            gs.append(np.full(len(recs), g))
        self._train(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs))
        self._fitted = True

    def predict(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        if not self._fitted:
            raise RuntimeError(f"{type(self).__name__}.predict called before fit")
        return np.asarray(self._score(self.rows(self.task, self.space, indices)), dtype=np.float64)
