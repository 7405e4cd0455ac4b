"""How well a cost model ranks: rank correlations and top-k recall.

Tuners act on the order of predictions, never their scale, so these compare
orders only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# scipy.stats is imported when a metric is computed: it alone takes ~1 s to import, and the tuner
# imports this module


def spearman(predicted: Sequence[float], actual: Sequence[float]) -> float:
    from scipy import stats
    return float(stats.spearmanr(predicted, actual).statistic)


def kendall(predicted: Sequence[float], actual: Sequence[float]) -> float:
    from scipy import stats
    return float(stats.kendalltau(predicted, actual).statistic)


def top_k_recall(predicted: Sequence[float], actual: Sequence[float], k: int) -> float:
    """Share of the truly best k (highest `actual`) among the predicted best k."""
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    pred_top = set(np.argsort(-np.asarray(predicted), kind="stable")[:k].tolist())
    true_top = set(np.argsort(-np.asarray(actual), kind="stable")[:k].tolist())
    return len(pred_top & true_top) / min(k, len(true_top))
