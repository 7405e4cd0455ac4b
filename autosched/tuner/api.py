"""`tune_task`: search one task's space on this machine, the whole pipeline in one call.

It wires what the rest of the package provides separately: the task's registered template
gives the space, a tuner proposes configs, a builder compiles and a runner times them, and
every measurement is kept. The builder and runner are the target's back end's on this machine
(`autosched.backend`) unless passed in; what it creates it also closes, and a builder or runner
passed in stays the caller's.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autosched.backend import backend_for
from autosched.measure import Builder, MeasureInput, MeasureResult, Record, Runner, measure_with
from autosched.space import Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task
from autosched.templates import config_filter, get_template
from autosched.tuner.base import Callback, TunerError
from autosched.tuner.callbacks import JsonLinesLog
from autosched.tuner.registry import get_tuner


@dataclass(frozen=True)
class TuneResult:
    """Every measurement of the run, in order, and the fastest config found (None when
    every candidate failed). `best_cost` is its median time in seconds (inf without one)."""

    space: ConfigSpace
    records: tuple[Record, ...]
    best: Config | None
    best_cost: float
    stopped_early: bool

    @property
    def failures(self) -> int:
        return sum(1 for _, res in self.records if not res.ok)


def tune_task(task: Task, target: Target | str, trials: int, tuner: str = "xgb", *, runner: Runner | None = None,
              builder: Builder | None = None, log: str | os.PathLike[str] | None = None, seed: int = 0,
              early_stopping: int | None = None, callbacks: Sequence[Callback] = (), emulate: bool = False,
              **tuner_options: Any) -> TuneResult:
    """Measure up to `trials` configs of `task` on `target` chosen by `tuner` ("random",
    "grid", "ga", "xgb"; `tuner_options` go to it, e.g. plan_size=32). `log` appends one
    JSON line per measurement; `callbacks` see every measured batch. `emulate` (cuda targets):
    candidates are built as the CPU emulation and checked there, costed by the static model
    of the GPU kernel and recorded under the emulated target (`Target.as_emulated`)."""
    if type(trials) is not int or trials <= 0:
        raise TunerError(f"trials must be a positive int, got {trials!r}")
    tuner_cls = get_tuner(tuner)
    target = Target.parse(target) if isinstance(target, str) else target
    backend = backend_for(target, emulate)
    with backend.measuring(builder, runner) as (builder, runner):
        target = runner.measured_target(target)  # records name the device it measures on (the GPU's model)
        if backend.emulated:  # costs are static estimates: records apart from every GPU timing
            target = target.as_emulated()
        template = get_template(task.op, target.kind)
        space = template.space(task, target)
        search = tuner_cls(task, space, target, seed=seed, **tuner_options)
        search.restrict(config_filter(template, task, target))

        records: list[Record] = []

        def keep(inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
            records.extend(zip(inputs, results))

        watchers = [keep, *callbacks] + ([JsonLinesLog(log)] if log is not None else [])
        summary = search.tune(trials, measure_with(builder, runner), watchers, early_stopping)
    return TuneResult(space, tuple(records), summary.best, summary.best_cost, summary.stopped_early)
