"""Tuning logs as the source of the schedules a build uses and of the history a tuning run resumes from.

A log is JSON lines, one measurement each (what `JsonLinesLog` writes). For every task key and
target the fastest successful record wins; its config is validated against the template's
space before it reaches a schedule, since a log may come from anywhere. A resumed run gets
every logged record of its tasks, so nothing is measured twice and its cost models start
trained. Records are matched on the target's ISA class too (a log line carries it): a schedule
tuned for AVX-512 says nothing about AVX2 code, and its space is another one.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from autosched.errors import AutoschedError
from autosched.measure import MeasureInput, MeasureResult, Record, RecordError
from autosched.schedule import Schedule
from autosched.space import ConfigSpace
from autosched.target import Target
from autosched.task import Task


class LogError(AutoschedError):
    """A tuning log line that is not a measurement record, or a config outside its space."""


@dataclass(frozen=True)
class BestRecord:
    config: dict
    cost: float
    where: str  # file:line, for error messages


@dataclass(frozen=True)
class LogLine:
    """One measurement as logged: the task key and target it was for, its config (as JSON, not yet
    checked against a space) and its validated result."""

    task: str
    target: str
    isa: str | None  # None in logs written before records named their ISA
    config: dict
    result: MeasureResult
    where: str  # file:line, for error messages

    def matches(self, target: Target) -> bool:
        return self.target == str(target) and self.isa == target.isa


def read_log(paths: Iterable[str | os.PathLike[str]]) -> Iterator[LogLine]:
    """Every measurement in the logs, in order; a line that is not one raises LogError naming it."""
    for path in paths:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise LogError(f"{path}: cannot read the tuning log: {e.strerror}") from None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                rec = json.loads(line)
                key, target, config, isa = rec["task"], rec["target"], rec["config"], rec.get("isa")
                result = MeasureResult.from_json(rec)
            except (json.JSONDecodeError, KeyError, TypeError, RecordError) as e:
                raise LogError(f"{where}: not a measurement record ({type(e).__name__}: {e})") from None
            if not (isinstance(key, str) and isinstance(target, str) and isinstance(config, dict)
                    and isinstance(isa, (str, type(None)))):
                raise LogError(f"{where}: not a measurement record (task, target, isa or config has the wrong type)")
            yield LogLine(key, target, isa, config, result, where)


def best_records(paths: Iterable[str | os.PathLike[str]]) -> dict[tuple[str, str, str | None], BestRecord]:
    """(task key, target string, ISA class) → the fastest successful measurement in the logs."""
    best: dict[tuple[str, str, str | None], BestRecord] = {}
    for line in read_log(paths):
        if not line.result.ok:
            continue
        key = (line.task, line.target, line.isa)
        if key not in best or line.result.cost < best[key].cost:
            best[key] = BestRecord(line.config, line.result.cost, line.where)
    return best


def load_history(paths: Iterable[str | os.PathLike[str]], tasks: Sequence[Task],
                 target: Target) -> dict[str, list[Record]]:
    """Task key → the logged measurements of that task on `target`, as records a tuner can resume
    from. Configs are validated against the task's space (a config from another space names its
    line); records of other tasks or targets are skipped, and so are tasks without a template."""
    from search_spaces import TemplateError, get_template
    by_key = {t.key: t for t in tasks}
    spaces: dict[str, ConfigSpace | None] = {}
    history: dict[str, list[Record]] = {}
    for line in read_log(paths):
        task = by_key.get(line.task)
        if task is None or not line.matches(target):
            continue
        if line.task not in spaces:
            try:
                spaces[line.task] = get_template(task.op, target.kind).space(task, target)
            except TemplateError:
                spaces[line.task] = None
        space = spaces[line.task]
        if space is None:
            continue
        try:
            config = space.from_json(line.config)
        except AutoschedError as e:
            raise LogError(f"{line.where}: {e}") from None
        history.setdefault(line.task, []).append((MeasureInput(task, target, config), line.result))
    return history


class TunedSchedules:
    """A build's `schedule_for`: the logged best config of a task when there is one for the
    target's ISA, else the default. `other_isa` collects the tasks whose only records are for
    another ISA, for the caller to say so once."""

    def __init__(self, logs: Iterable[str | os.PathLike[str]]):
        self.best = best_records(logs)
        self.used: list[str] = []
        self.other_isa: dict[str, set[str | None]] = {}

    def __call__(self, task: Task, target: Target) -> tuple[Schedule, list]:
        from autosched.build import default_kernel
        from search_spaces import get_template
        rec = self.best.get((task.key, str(target), target.isa))
        if rec is None:
            isas = {isa for key, tgt, isa in self.best if key == task.key and tgt == str(target)}
            if isas:
                self.other_isa[task.key] = isas
            return default_kernel(task, target)
        template = get_template(task.op, target.kind)
        try:
            config = template.space(task, target).from_json(rec.config)
        except AutoschedError as e:
            raise LogError(f"{rec.where}: {e}") from None
        self.used.append(task.key)
        return template.apply(task, config, target)
