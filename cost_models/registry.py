"""Cost models and feature extractors by name, for tuner options and the CLI."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

from autosched.measure import TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target
from cost_models.base import CostModel
from cost_models.features import FeatureExtractor, KnobFeatures
from cost_models.forest import ForestCostModel
from cost_models.loop_features import ConcatFeatures, LoopFeatures
from cost_models.xgboost_model import XGBCostModel

#: name -> factory taking the target (loop-nest features lower each config for it)
FEATURES: Mapping[str, Callable[[Target | None], FeatureExtractor]] = {
    "knob": lambda target: KnobFeatures(),
    "loop": lambda target: LoopFeatures(_needs(target)),
    "knob+loop": lambda target: ConcatFeatures(KnobFeatures(), LoopFeatures(_needs(target))),
}

COST_MODELS: Mapping[str, Callable[..., CostModel]] = {
    "xgb-rank": partial(XGBCostModel, objective="rank"),
    "xgb-reg": partial(XGBCostModel, objective="reg"),
    "forest": ForestCostModel,
}


def _needs(target: Target | None) -> Target:
    if target is None:
        raise ValueError("loop-nest features lower configs for a target: pass target=")
    return target


def create_cost_model(name: str, task: TaskLike, space: ConfigSpace, *, features: str = "knob",
                      seed: int = 0, target: Target | None = None) -> CostModel:
    if name not in COST_MODELS:
        raise ValueError(f"unknown cost model {name!r}; known: {', '.join(COST_MODELS)}")
    if features not in FEATURES:
        raise ValueError(f"unknown feature extractor {features!r}; known: {', '.join(FEATURES)}")
    return COST_MODELS[name](task, space, features=FEATURES[features](target), seed=seed)
