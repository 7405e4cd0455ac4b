"""Search strategies by name: the one place names map to tuner classes."""

from __future__ import annotations

from collections.abc import Mapping

from autosched.tuner.base import Tuner, TunerError
from autosched.tuner.genetic import GATuner
from autosched.tuner.grid import GridTuner
from autosched.tuner.model_based import ModelBasedTuner
from autosched.tuner.random_search import RandomTuner

TUNERS: Mapping[str, type[Tuner]] = {t.name: t for t in (RandomTuner, GridTuner, GATuner, ModelBasedTuner)}


def get_tuner(name: str) -> type[Tuner]:
    try:
        return TUNERS[name]
    except KeyError:
        raise TunerError(f"unknown tuner {name!r}; known: {', '.join(TUNERS)}") from None
