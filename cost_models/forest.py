"""Random-forest cost model (scikit-learn): a second opinion behind the same
interface, to check that a tuner's gains come from learning, not from XGBoost."""

from __future__ import annotations

import numpy as np

from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from cost_models.base import FeatureModel
from cost_models.features import FeatureExtractor, KnobFeatures


class ForestCostModel(FeatureModel):
    def __init__(self, task: TaskLike, space: ConfigSpace, *, features: FeatureExtractor | None = None,
                 trees: int = 100, seed: int = 0) -> None:
        from sklearn.ensemble import RandomForestRegressor  # imported when used, as xgboost is
        super().__init__(task, space, features or KnobFeatures())
        self._forest = RandomForestRegressor(n_estimators=trees, random_state=seed, n_jobs=1)

    def _train(self, x: np.ndarray, y: np.ndarray, groups: np.ndarray) -> None:
        self._forest.fit(x, y)

    def _score(self, x: np.ndarray) -> np.ndarray:
        return self._forest.predict(x)
