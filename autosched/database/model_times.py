"""The latency model of a whole graph: what its build will take, from the database.

A model's latency is more than its tunable tasks' records: the untunable kernels (pools,
layout conversions, copies), the executor between calls, and the difference between a
kernel alone and the same kernel in the model. The model check at the end of every tune
(`autosched.model_check`) profiles the build it settles on and keeps each kernel's time in
the model (`kernel_times`, per task and config) and the build's latency beside the sum of its
kernels (`model_times`). `estimate` puts them together:

    tuned tasks' records × their context + other tasks' in-model times + executor time per call × calls

where a task's context is its kernels' time in the model over their records' time alone
(weights that a model's other kernels evicted, inputs the previous kernel left in cache).

and says beside it what the last timed build of the model took, so that the share the
records do not explain is visible (`autosched db best`, the report, `benchmarks/tuning.py`).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import and_, delete, insert, select

from autosched.database.identity import task_digest, tasks_digest
from autosched.database.queries import Best, best, fastest_record
from autosched.database.schema import kernel_times, model_times
from autosched.database.store import Database
from autosched.database.stored import config_text
from autosched.space import Config
from autosched.target import Target
from autosched.task import Task
from autosched.templates import get_template


@dataclass(frozen=True)
class BuildTiming:
    """One timed build of a model: medians of its runs, and its kernel calls' sum from a profile."""

    tuned_ms: float
    untuned_ms: float
    kernels_ms: float
    calls: int
    threads: int
    session: int | None = None

    @property
    def executor_ms(self) -> float:
        """What the model took besides its kernels: calls, thread-pool wake-ups, barriers."""
        return max(self.tuned_ms - self.kernels_ms, 0.0)


def _config_key(config: Config | None) -> str:
    return "" if config is None else config_text(config.to_json())


def record_kernel_time(db: Database, task: Task, target: Target, config: Config | None, seconds: float,
                       session: int | None = None) -> None:
    """Keep one call's in-model time of `task` built with `config` (None: its default schedule)."""
    where = and_(kernel_times.c.task == task_digest(task.key), kernel_times.c.fingerprint == target.fingerprint,
                 kernel_times.c.config == _config_key(config))
    with db.writing() as conn:
        conn.execute(delete(kernel_times).where(where))
        conn.execute(insert(kernel_times).values(task=task_digest(task.key), fingerprint=target.fingerprint,
                                                 config=_config_key(config), seconds=seconds, session_id=session,
                                                 timestamp=time.time()))


def kernel_time(db: Database, task: Task, target: Target, config: Config | None) -> float | None:
    """One call's in-model seconds of `task` with `config` (None: its default) here, if timed."""
    query = select(kernel_times.c.seconds).where(
        kernel_times.c.task == task_digest(task.key), kernel_times.c.fingerprint == target.fingerprint,
        kernel_times.c.config == _config_key(config))
    with db.reading() as conn:
        return conn.execute(query).scalar_one_or_none()


def record_build_timing(db: Database, tasks: Sequence[Task], target: Target, timing: BuildTiming) -> None:
    with db.writing() as conn:
        conn.execute(insert(model_times).values(
            tasks=tasks_digest(t.key for t in tasks), fingerprint=target.fingerprint, threads=timing.threads,
            tuned_ms=timing.tuned_ms, untuned_ms=timing.untuned_ms, kernels_ms=timing.kernels_ms, calls=timing.calls,
            session_id=timing.session, timestamp=time.time()))


def last_build_timing(db: Database, tasks: Sequence[Task], target: Target) -> BuildTiming | None:
    """The latest timed build of the model these tasks make, on this machine."""
    query = (select(model_times).where(model_times.c.tasks == tasks_digest(t.key for t in tasks),
                                       model_times.c.fingerprint == target.fingerprint)
             .order_by(model_times.c.timestamp.desc()).limit(1))
    with db.reading() as conn:
        row = conn.execute(query).mappings().first()
    return None if row is None else BuildTiming(row["tuned_ms"], row["untuned_ms"], row["kernels_ms"], row["calls"],
                                                row["threads"], row["session_id"])


@dataclass(frozen=True)
class TaskEstimate:
    task: Task
    ms: float | None          # weight × one call's time, by its source; None: never timed
    source: str               # "record" (alone, × context), "model" (in the model: no record here) or "-"
    in_model_ms: float | None  # weight × the built config's time in the model, where profiled
    best: Best | None
    context: float = 1.0      # the record's time in the model over alone (`task_context`; 1: never profiled)


@dataclass(frozen=True)
class ModelEstimate:
    """A model's estimated latency by part, and the last measured build for comparison."""

    tasks: tuple[TaskEstimate, ...]
    executor_ms: float        # per-call executor time of the last timed build × its calls (0: never timed)
    measured: BuildTiming | None

    @property
    def records_ms(self) -> float:
        """The tuned tasks' records, each scaled to the model's context."""
        return sum(t.ms for t in self.tasks if t.source == "record" and t.ms is not None)

    @property
    def alone_ms(self) -> float:
        """The same records as timed alone: what the estimate was before the context."""
        return sum(t.ms / t.context for t in self.tasks if t.source == "record" and t.ms is not None)

    @property
    def others_ms(self) -> float:
        return sum(t.ms for t in self.tasks if t.source == "model" and t.ms is not None)

    @property
    def unknown(self) -> int:
        return sum(1 for t in self.tasks if t.ms is None)

    @property
    def total_ms(self) -> float:
        return self.records_ms + self.others_ms + self.executor_ms

    def by_op(self) -> Mapping[str, tuple[float, float]]:
        """Op → (estimated ms, ms of the same kernels in the last profiled build), for the split by kernel class."""
        out: dict[str, tuple[float, float]] = {}
        for t in self.tasks:
            est, seen = out.get(t.task.op, (0.0, 0.0))
            out[t.task.op] = (est + (t.ms or 0.0), seen + (t.in_model_ms or 0.0))
        return out


def task_context(db: Database, task: Task, target: Target, config: Config | None = None) -> float | None:
    """How much slower `task`'s kernels ran in the model than alone here: `config`'s own in-model
    time over its fastest record where a model check profiled it, else the median of that ratio
    over the task's configs it profiled (its default's included), else None. On ResNet-18 (EPYC Zen
    4, 2 threads, 1000 trials) the 7x7 stage's 3x3 kernels ran 1.5-2.4x their records in the
    model (9.4 MB of weights each, which the other layers' weights evict from the 32 MB L3),
    the 56x56 stage's 1.1-1.2x, and the estimate from records alone was 0.77 of the build."""
    where = and_(kernel_times.c.task == task_digest(task.key), kernel_times.c.fingerprint == target.fingerprint)
    with db.reading() as conn:
        seen = {config: seconds for config, seconds in conn.execute(
            select(kernel_times.c.config, kernel_times.c.seconds).where(where))}
    if not seen:
        return None
    default = get_template(task.op, target.kind).fallback(task, target)
    ratios = {}
    for key, seconds in seen.items():
        text = key or (None if default is None else config_text(default.to_json()))
        alone = None if text is None else fastest_record(db, task, target, text)
        if alone:
            ratios[key] = seconds / alone
    if not ratios:
        return None
    own = _config_key(config)
    if config is not None and default is not None and own == config_text(default.to_json()):
        own = ""
    return ratios.get(own, float(np.median(list(ratios.values()))))


def estimate(db: Database, tasks: Sequence[Task], target: Target, built: Mapping[str, Best | None]) -> ModelEstimate:
    """The model's latency from the database. `built` maps each task key to the record whose
    config its build uses (None or missing: its default), as `TunedSchedules.choose` decides: that
    record's time in the model's context (`task_context`) counts where there is one, else the
    in-model time of what the build uses."""
    parts = []
    for task in tasks:
        found = built.get(task.key)
        seen = kernel_time(db, task, target, None if found is None else found.config)
        in_model = None if seen is None else 1e3 * task.weight * seen
        here = found is not None and found.fingerprint == target.fingerprint
        if found is not None and not found.static_estimate and (here or in_model is None):
            context = (task_context(db, task, target, found.config) if here else None) or 1.0
            parts.append(TaskEstimate(task, 1e3 * task.weight * found.cost * context, "record", in_model, found,
                                      context))
        elif in_model is not None:
            parts.append(TaskEstimate(task, in_model, "model", in_model, found))
        else:
            parts.append(TaskEstimate(task, None, "-", None, None))
    measured = last_build_timing(db, tasks, target)
    executor = 0.0 if measured is None else measured.executor_ms
    return ModelEstimate(tuple(parts), executor, measured)


def context_factors(db: Database, tasks: Sequence[Task], target: Target) -> dict[str, float]:
    """Task key → `task_context` of its best config, for each task whose best record was measured
    here and whose kernels a model check profiled."""
    out = {}
    for task in tasks:
        found = best(db, task, target)
        if found is None or found.fingerprint != target.fingerprint or found.cost <= 0:
            continue
        factor = task_context(db, task, target, found.config)
        if factor is not None:
            out[task.key] = factor
    return out
