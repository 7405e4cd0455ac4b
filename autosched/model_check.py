"""The end of a tune: the tuned build timed against the untuned one in the model, and the tuned
choices with the largest expected gains A/B-tested there.

Records time each kernel alone with its data warm; the model runs it after kernels that
evicted its weights, beside the executor's threads. Issue 18 measured tuned builds 4-15%
slower than untuned ones while their records summed to less. So every tune ends by asking the
model: the `ab_tasks` tuned configs with the largest estimated gains (task weight × the
default's record − the config's) are each timed in the model against the same build with only
that task on its default schedule, in alternating blocks; a config that loses by more than
in-model noise gets a verdict that keeps it out of builds (`autosched.database.verdicts`), one
that wins by more gets one that keeps it in, and within noise nothing is decided. Last, the tuned build is timed against the untuned one; if it is still slower, every
tuned config in it that the model has not judged a win is declined too, so that what
`autosched build` then makes is never slower than the untuned build, as far as the model's
timing can tell.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autosched.compile.evaluate import alternate, sample_inputs
from autosched.compile.model import build_model, default_kernel
from autosched.database import Database, TunedSchedules
from autosched.database.model_times import BuildTiming, record_build_timing, record_kernel_time
from autosched.database.queries import Best, config_cost
from autosched.database.verdicts import IN_MODEL_NOISE, Verdict, record_verdict
from autosched.graph.ir import Graph
from autosched.runtime import Model, load_model
from autosched.target import Target
from autosched.task import Task
from autosched.tempdirs import temp_dir
from autosched.templates import get_template

log = logging.getLogger("autosched.model_check")


@dataclass(frozen=True)
class TaskVerdict:
    task: str                  # task key
    op: str
    estimated_gain_ms: float   # weight × (default's record − config's record); 0 where the default has none
    with_ms: float             # the model with the task's tuned config
    without_ms: float          # the same build with this task on its default schedule
    wins: bool | None          # None: the two within in-model noise, no verdict


@dataclass(frozen=True)
class ModelCheck:
    untuned_ms: float
    first_tuned_ms: float      # the tuned build before this check's verdicts
    tuned_ms: float            # after them: what `autosched build` makes now
    tested: tuple[TaskVerdict, ...]
    declined: int              # tuned configs the final comparison declined (the tuned build was slower)
    runs: int                  # timed runs of each build per comparison
    threads: int

    @property
    def speedup(self) -> float:
        """Untuned over tuned latency: above 1 is faster."""
        return self.untuned_ms / self.tuned_ms


class _Builds:
    """Model builds into one temporary directory, each loaded once and timed on the same inputs."""

    def __init__(self, graph: Graph, target: Target, directory: Path, threads: int) -> None:
        self.graph, self.target, self.directory, self.threads = graph, target, directory, threads
        self.feeds = sample_inputs(graph, 0)
        self.models: list[Model] = []

    def build(self, schedule_for) -> Model:
        files = build_model(self.graph, self.directory / f"variant{len(self.models)}.so", self.target, schedule_for)
        model = load_model(files.library)
        model.set_num_threads(self.threads)
        self.models.append(model)
        return model

    def time(self, a: Model, b: Model, runs: int) -> tuple[float, float]:
        """Median ms of each, timed in alternating blocks."""
        ins = [np.ascontiguousarray(self.feeds[v["name"]]) for v in a.inputs]
        outs = [[np.empty(v["shape"], np.dtype(v["dtype"])) for v in m.outputs] for m in (a, b)]
        times = alternate([lambda: a.run_into(ins, outs[0]), lambda: b.run_into(ins, outs[1])], runs)
        return 1e3 * float(np.median(times[0])), 1e3 * float(np.median(times[1]))

    def close(self) -> None:
        for model in self.models:
            model.close()


def _keep_timings(db: Database, tasks: list[Task], target: Target, model: Model, feeds, schedules: TunedSchedules,
                  untuned_ms: float, tuned_ms: float, threads: int, session: int | None) -> None:
    """Profile the build the check settled on and keep each task's time in it (per call, under
    the config it was built with) and the build's latency beside its kernels' sum: the parts of
    the latency model (`autosched.database.model_times`)."""
    calls = model.profile(feeds, runs=10)
    keys = [t["key"] for t in model.manifest["tasks"]]
    by_key = {t.key: t for t in tasks}
    per_task: dict[str, list[float]] = {}
    for call in calls:
        per_task.setdefault(keys[call.task], []).append(call.seconds)
    for key, seconds in per_task.items():
        if key in by_key:
            found = schedules.used.get(key)
            record_kernel_time(db, by_key[key], target, None if found is None else found.config,
                               sum(seconds) / len(seconds), session)
    kernels_ms = 1e3 * sum(c.seconds for c in calls)
    record_build_timing(db, tasks, target, BuildTiming(tuned_ms, untuned_ms, kernels_ms, len(calls), threads, session))


def estimated_gain(db: Database, task: Task, target: Target, found: Best) -> float | None:
    """Seconds per model run the task's tuned config saves over its default, by their records (0
    where the default was never timed here); None where the config is the default."""
    default = get_template(task.op, target.kind).fallback(task, target)
    if default is None or default.to_json() == found.config.to_json():
        return None
    cost = config_cost(db, task, target, default, found.caches)
    return 0.0 if cost is None else task.weight * (cost - found.cost)


def judge(with_ms: float, without_ms: float) -> bool | None:
    """An A/B test's verdict: a win or a loss only where the model's latency differs by more than
    in-model noise, else None (the build goes on trusting the config by its isolated time). On
    a shared 2-core host, alternated medians of the same two builds disagreed by up to 17%: a
    ResNet-18 convolution's tuned config "lost" by 3% and went back to its default, which the
    same builds timed again showed 14% slower in the model."""
    if with_ms < (1 - IN_MODEL_NOISE) * without_ms:
        return True
    if with_ms > (1 + IN_MODEL_NOISE) * without_ms:
        return False
    return None


def check_in_model(graph: Graph, tasks: list[Task], target: Target, db: Database, fallback: Database | None = None,
                   ab_tasks: int = 3, runs: int = 20, threads: int | None = None,
                   session: int | None = None) -> ModelCheck:
    """A/B-test `graph`'s tuned build in the model (see the module's docstring) and record the
    verdicts in `db`; `fallback` is the database of shipped records a build also reads."""
    threads = threads or os.cpu_count() or 1
    by_key = {t.key: t for t in tasks}
    with temp_dir("check") as tmp:
        builds = _Builds(graph, target, Path(tmp), threads)
        try:
            untuned = builds.build(default_kernel)
            schedules = TunedSchedules(db, fallback)
            tuned = builds.build(schedules)
            _, first_ms = builds.time(untuned, tuned, runs)
            gains = {key: gain for key, found in schedules.used.items()
                     if key in by_key and (gain := estimated_gain(db, by_key[key], target, found)) is not None}
            ranked = sorted(gains, key=lambda k: -gains[k])[:ab_tasks]
            tested: list[TaskVerdict] = []
            reverted: set[str] = set()
            for key in ranked:
                task, found = by_key[key], schedules.used[key]
                without = builds.build(TunedSchedules(db, fallback, default_for=frozenset(reverted | {key})))
                with_ms, without_ms = builds.time(tuned, without, runs)
                wins = judge(with_ms, without_ms)
                if wins is not None:
                    record_verdict(db, task, target, found.config, Verdict(wins, with_ms, without_ms, session))
                tested.append(TaskVerdict(key, task.op, 1e3 * gains[key], with_ms, without_ms, wins))
                if wins is False:
                    reverted.add(key)
                    tuned = without
            final = TunedSchedules(db, fallback)  # what `autosched build` makes after these verdicts
            tuned = builds.build(final)  # the source of the last build kept: compiled from the cache
            untuned_ms, tuned_ms = builds.time(untuned, tuned, runs)
            declined = 0
            if tuned_ms > untuned_ms:
                judged = {v.task for v in tested if v.wins}
                for key, found in final.used.items():
                    if key in gains and key not in judged:
                        record_verdict(db, by_key[key], target, found.config, Verdict(False, tuned_ms, untuned_ms, session))
                        declined += 1
                if declined:  # the untuned build but for the configs judged wins
                    log.warning("the tuned build ran slower than the untuned one in the model (%.3f vs %.3f ms): "
                                "%d tuned configs not judged wins are declined", tuned_ms, untuned_ms, declined)
                    final = TunedSchedules(db, fallback)
                    tuned = builds.build(final)
                    untuned_ms, tuned_ms = builds.time(untuned, tuned, runs)
            _keep_timings(db, tasks, target, tuned, builds.feeds, final, untuned_ms, tuned_ms, threads, session)
        finally:
            builds.close()
    return ModelCheck(untuned_ms, first_ms, tuned_ms, tuple(tested), declined, runs, threads)
