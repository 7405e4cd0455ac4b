"""Measurement: records, the Builder/Runner seams, and a replay runner."""

from autosched.measure.interface import Builder, MeasureBatch, Runner, measure_with
from autosched.measure.record import (
    BuildResult,
    ErrorKind,
    MeasureInput,
    MeasureResult,
    Record,
    RecordError,
    TaskLike,
    record_to_json,
)
from autosched.measure.replay import NullBuilder, Outcome, ReplayRunner, replay_measure

__all__ = [
    "Builder", "BuildResult", "ErrorKind", "MeasureBatch", "MeasureInput", "MeasureResult", "NullBuilder", "Outcome",
    "Record", "RecordError", "ReplayRunner", "Runner", "TaskLike", "measure_with", "record_to_json",
    "replay_measure",
]
