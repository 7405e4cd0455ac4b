"""Cost models that rank configs for the model-based tuner, their features and metrics."""

from cost_models.base import CostModel, FeatureModel, throughput_targets
from cost_models.features import FeatureExtractor, KnobFeatures
from cost_models.forest import ForestCostModel
from cost_models.loop_features import ConcatFeatures, LoopFeatures, loop_nest_features
from cost_models.metrics import kendall, spearman, top_k_recall
from cost_models.registry import COST_MODELS, FEATURES, create_cost_model
from cost_models.xgboost_model import XGBCostModel

__all__ = [
    "COST_MODELS", "ConcatFeatures", "CostModel", "FEATURES", "FeatureExtractor", "FeatureModel", "ForestCostModel",
    "KnobFeatures", "LoopFeatures", "XGBCostModel", "create_cost_model", "kendall", "loop_nest_features", "spearman",
    "throughput_targets", "top_k_recall",
]
