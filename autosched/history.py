"""Tuning logs as the source of the schedules a build uses.

A log is JSON lines, one measurement each (what `JsonLinesLog` writes). For every task key and
target the fastest successful record wins; its config is validated against the template's
space before it reaches a schedule, since a log may come from anywhere.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from autosched.errors import AutoschedError
from autosched.schedule import Schedule
from autosched.target import Target
from autosched.task import Task


class LogError(AutoschedError):
    """A tuning log line that is not a measurement record, or a config outside its space."""


@dataclass(frozen=True)
class BestRecord:
    config: dict
    cost: float
    where: str  # file:line, for error messages


def best_records(paths: Iterable[str | os.PathLike[str]]) -> dict[tuple[str, str], BestRecord]:
    """(task key, target string) → the fastest successful measurement in the logs."""
    best: dict[tuple[str, str], BestRecord] = {}
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
                key, target, costs, kind = rec["task"], rec["target"], rec["costs"], rec["error_kind"]
                config = rec["config"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise LogError(f"{where}: not a measurement record ({type(e).__name__}: {e})") from None
            if kind != "NO_ERROR":
                continue
            if not isinstance(costs, list) or not costs or not all(isinstance(c, (int, float)) and c > 0 for c in costs):
                raise LogError(f"{where}: a successful record needs positive costs, got {costs!r}")
            cost = sorted(costs)[len(costs) // 2]
            if (key, target) not in best or cost < best[(key, target)].cost:
                best[(key, target)] = BestRecord(config, cost, where)
    return best


class TunedSchedules:
    """A build's `schedule_for`: the logged best config of a task when there is one, else the default."""

    def __init__(self, logs: Iterable[str | os.PathLike[str]]):
        self.best = best_records(logs)
        self.used: list[str] = []

    def __call__(self, task: Task, target: Target) -> tuple[Schedule, list]:
        from autosched.build import default_kernel
        from search_spaces import get_template
        rec = self.best.get((task.key, str(target)))
        if rec is None:
            return default_kernel(task, target)
        template = get_template(task.op, target.kind)
        try:
            config = template.space(task, target).from_json(rec.config)
        except AutoschedError as e:
            raise LogError(f"{rec.where}: {e}") from None
        self.used.append(task.key)
        return template.apply(task, config, target)
