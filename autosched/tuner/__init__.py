"""Search strategies over config spaces and the loop that runs them."""

from autosched.tuner.api import TuneResult, tune_task
from autosched.tuner.base import Callback, Tuner, TunerError, TuneSummary
from autosched.tuner.callbacks import JsonLinesLog, ProgressDisplay
from autosched.tuner.genetic import GAOptions, GATuner
from autosched.tuner.grid import GridTuner
from autosched.tuner.model_based import ModelBasedOptions, ModelBasedTuner
from autosched.tuner.options import BaseOptions, OptionError
from autosched.tuner.random_search import RandomTuner
from autosched.tuner.registry import TUNERS, get_tuner

__all__ = [
    "BaseOptions", "Callback", "GAOptions", "GATuner", "GridTuner", "JsonLinesLog", "ModelBasedOptions",
    "ModelBasedTuner", "OptionError", "ProgressDisplay", "RandomTuner", "TUNERS", "TuneResult", "TuneSummary", "Tuner",
    "TunerError", "get_tuner", "tune_task",
]
