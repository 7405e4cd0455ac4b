"""Measurement without compiling: replay precomputed results by config index.

Tuners are tested and compared against a table (from a synthetic cost function
or from database records) instead of a compiler and a device, so a strategy's
behaviour is reproducible and fast to check.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from autosched.measure.interface import Builder, MeasureBatch, Runner, measure_with
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput, MeasureResult, Record, RecordError

Outcome = float | Sequence[float] | ErrorKind | MeasureResult


class NullBuilder(Builder):
    """Builds nothing; pairs with runners that execute no code."""

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        return [BuildResult(artifact=None, error_kind=ErrorKind.NO_ERROR, error_msg="", build_s=0.0) for _ in inputs]


def _as_result(index: int, outcome: Outcome) -> MeasureResult:
    if isinstance(outcome, MeasureResult):
        return outcome
    if isinstance(outcome, ErrorKind):
        if outcome is ErrorKind.NO_ERROR:
            raise RecordError(f"replay entry {index}: NO_ERROR needs costs; give the cost instead")
        return MeasureResult.failure(outcome, f"replayed {outcome.name}", build_s=0.0, timestamp=0.0)
    if isinstance(outcome, bool):  # an int to Python, but never a cost (tuple() refused it before)
        raise TypeError(f"replay entry {index}: {outcome!r} is not a cost")
    costs = (outcome,) if isinstance(outcome, (int, float)) else tuple(outcome)
    return MeasureResult(costs=costs, error_kind=ErrorKind.NO_ERROR, error_msg="", build_s=0.0, timestamp=0.0)


class ReplayRunner(Runner):
    """Answers each input from `table[config.index]`: a cost in seconds, a tuple
    of repeats, an ErrorKind, or a full MeasureResult. An index not in the table
    is an error, or the failure `missing` when given (sparse tables from records)."""

    def __init__(self, table: Mapping[int, Outcome], missing: ErrorKind | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._table = {int(i): _as_result(int(i), o) for i, o in table.items()}
        if missing is ErrorKind.NO_ERROR:
            raise RecordError("missing must be an error kind, not NO_ERROR")
        self._missing = missing
        self._clock = clock

    @classmethod
    def from_records(cls, records: Iterable[Record], missing: ErrorKind | None = None) -> ReplayRunner:
        """Replay measured records of one space; a later record of an index wins."""
        table: dict[int, MeasureResult] = {}
        spaces = set()
        for inp, res in records:
            spaces.add(inp.config.space.fingerprint)
            table[inp.config.index] = res
        if len(spaces) > 1:
            raise RecordError(f"records come from {len(spaces)} different spaces; replay one space at a time")
        return cls(table, missing=missing)

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        return [self._replay(inp) for inp in inputs]

    def _replay(self, inp: MeasureInput) -> MeasureResult:
        res = self._table.get(inp.config.index)
        if res is None:
            if self._missing is None:
                raise RecordError(
                    f"replay table has no result for config {inp.config.index} of task {inp.task.key!r}"
                )
            res = MeasureResult.failure(self._missing, "not in replay table", build_s=0.0, timestamp=0.0)
        return dataclasses.replace(res, timestamp=self._clock())


def replay_measure(table: Mapping[int, Outcome], missing: ErrorKind | None = None) -> MeasureBatch:
    """A MeasureBatch that replays `table` (see ReplayRunner)."""
    return measure_with(NullBuilder(), ReplayRunner(table, missing=missing))
