"""XGBoost cost model: gradient-boosted trees over config features.

`rank` (rank:pairwise) learns only the order of configs within a task, which
is all a tuner needs and is immune to the scale differences between tasks;
`reg` (reg:squarederror) predicts normalized throughput directly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from cost_models.base import FeatureModel
from cost_models.features import FeatureExtractor, KnobFeatures

if TYPE_CHECKING:
    import xgboost as xgb
# xgboost (and the scikit-learn it imports) is imported when a model first trains: together they
# take ~2.5 s, which every `autosched build`, `check` or `db` paid for nothing

# XGBoost >= 2 builds ranking pairs around each group's top k by default; the
# annealer needs the whole order to leave poor regions, so pairs are sampled
# uniformly ("mean"): held-out Spearman on tests/synthetic.py rose from ~0.65 to ~0.9.
#: objective name -> its XGBoost parameters (strings and numbers, as xgb.train takes them)
OBJECTIVES: dict[str, dict[str, str | int]] = {
    "rank": {"objective": "rank:pairwise", "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 8},
    "reg": {"objective": "reg:squarederror"},
}


class XGBCostModel(FeatureModel):
    """`nthread` defaults to 1: tuning data are hundreds of rows, where thread
    start-up made training and prediction ~20x slower with 2 threads."""

    def __init__(self, task: TaskLike, space: ConfigSpace, *, features: FeatureExtractor | None = None,
                 objective: str = "rank", rounds: int = 100, max_depth: int = 6, eta: float = 0.3,
                 seed: int = 0, nthread: int = 1) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown XGBoost objective {objective!r}; known: {', '.join(OBJECTIVES)}")
        super().__init__(task, space, features or KnobFeatures())
        self.rounds = rounds
        self.params: dict[str, str | int | float] = {
            **OBJECTIVES[objective], "max_depth": max_depth, "eta": eta, "seed": seed, "nthread": nthread, "verbosity": 0}
        self._booster: xgb.Booster | None = None

    def _train(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        import xgboost as xgb
        order = np.argsort(groups, kind="stable")  # ranking needs rows grouped by query id
        data = xgb.DMatrix(x[order], label=y[order], qid=groups[order])
        self._booster = xgb.train(self.params, data, num_boost_round=self.rounds)

    def _score(self, x: np.ndarray) -> np.ndarray:
        assert self._booster is not None
        return self._booster.inplace_predict(x)
