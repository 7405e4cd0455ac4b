"""Cost models and feature extractors by name, for tuner options and the CLI."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from cost_models.base import CostModel
from cost_models.features import FeatureExtractor, KnobFeatures
from cost_models.forest import ForestCostModel
from cost_models.xgboost_model import XGBCostModel

FEATURES: Mapping[str, Callable[[], FeatureExtractor]] = {"knob": KnobFeatures}

COST_MODELS: Mapping[str, Callable[..., CostModel]] = {
    "xgb-rank": partial(XGBCostModel, objective="rank"),
    "xgb-reg": partial(XGBCostModel, objective="reg"),
    "forest": ForestCostModel,
}


def create_cost_model(name: str, task: TaskLike, space: ConfigSpace, *, features: str = "knob",
                      seed: int = 0) -> CostModel:
    if name not in COST_MODELS:
        raise ValueError(f"unknown cost model {name!r}; known: {', '.join(COST_MODELS)}")
    if features not in FEATURES:
        raise ValueError(f"unknown feature extractor {features!r}; known: {', '.join(FEATURES)}")
    return COST_MODELS[name](task, space, features=FEATURES[features](), seed=seed)
