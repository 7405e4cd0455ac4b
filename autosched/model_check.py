"""The end of a tune: each task's fastest configs timed kernel by kernel in the model, the
tuned build timed against the untuned one there, and the tuned choices with the largest
expected gains A/B-tested there.

Records time each kernel alone with its data warm; the model runs it after kernels that
evicted its weights, beside the executor's threads. Issue 18 measured tuned builds 4-15%
slower than untuned ones while their records summed to less. So every tune ends by asking the
model. First, each task's `shortlist` fastest configs alone are built into as many builds (the
j-th fastest of every task in build j) and profiled in turn with the untuned build: per task,
the fastest kernel in the model wins if it beats the default's beyond noise, and the configs it
or the default beat beyond noise lose (`kernel_verdicts`). On a MobileNetV2 tuned for 400
trials (Xeon, 2 threads; shortlists of 6) the fastest config alone lost in the model for 18 of
22 judged tasks, and a config ranked 2nd to 6th alone won for 10. Then the `ab_tasks` tuned
configs not so judged with the largest estimated gains (task weight × the default's record −
the config's) are each timed in the model against the same build with only
that task on its default schedule, in alternating blocks; a config that loses by more than
in-model noise gets a verdict that keeps it out of builds (`autosched.database.verdicts`), one
that wins by more gets one that keeps it in, and within noise nothing is decided. Last, the tuned build is timed against the untuned one; if it is still slower, every
tuned config in it that the model has not judged a win is declined too, and if what is left
is slower beyond noise, the configs judged wins as well (each won in a build of its own), so
that what `autosched build` then makes is never slower than the untuned build, as far as the
model's timing can tell.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autosched.compile.evaluate import alternate_rounds, joined, paired_ratio, sample_inputs
from autosched.compile.model import build_model, default_kernel
from autosched.database import Database, TunedSchedules
from autosched.database.model_times import BuildTiming, record_build_timing, record_kernel_time
from autosched.database.queries import Best, config_cost, fastest
from autosched.database.stored import config_text
from autosched.database.verdicts import IN_MODEL_NOISE, Verdict, losers, record_verdict, verdict_of
from autosched.graph.ir import Graph
from autosched.measure.caches import MEMORY_BANDWIDTH, llc_bytes
from autosched.runtime import KernelCall, Model, load_model
from autosched.space import Config
from autosched.target import CpuCapabilities, Target
from autosched.task import Task
from autosched.tempdirs import temp_dir
from autosched.templates import TemplateError, get_template

log = logging.getLogger("autosched.model_check")

#: configs per task the check times in the model, kernel by kernel: its fastest alone
SHORTLIST = 6
#: rounds of profiling the shortlists' builds in turn
KERNEL_ROUNDS = 5
#: kernels faster than this in the untuned build are not judged: the per-call medians of a 0.1 ms
#: classifier moved by 18% between two loads of one ResNet-18 build, its convolutions' by 6% at most
MIN_JUDGED_S = 50e-6
#: each build of a whole-model comparison is timed at least this long (`alternate`): 20 runs of
#: a 0.6 ms block are 12 ms, and a tuned build measured 1.22x its untuned one that way, 0.96x
#: in 60 runs (EfficientNet-style block, 2-vCPU EPYC)
MIN_SECONDS = 0.1
#: runs per block of a whole-model comparison: 20 runs make four rounds (`paired_ratio`)
BLOCK = 5


@dataclass(frozen=True)
class TaskVerdict:
    task: str                  # task key
    op: str
    estimated_gain_ms: float   # weight × (default's record − config's record); 0 where the default has none
    with_ms: float             # the model with the task's tuned config
    without_ms: float          # the same build with this task on its default schedule
    wins: bool | None          # None: the two within in-model noise, no verdict


@dataclass(frozen=True)
class KernelVerdict:
    """A task's shortlist timed kernel by kernel in the model: its default and each of its
    fastest configs alone, each in a build of its own rank."""
    task: str                       # task key
    op: str
    default_ms: float               # the task's kernel per call in the untuned build (at least its streaming floor)
    configs_ms: tuple[float, ...]   # each shortlisted config's kernel per call, fastest alone first (likewise)
    verdicts: tuple[bool | None, ...]  # per config: won (the one built), lost, or within noise

    @property
    def chosen(self) -> int | None:
        return next((j for j, wins in enumerate(self.verdicts) if wins), None)


@dataclass(frozen=True)
class ModelCheck:
    untuned_ms: float
    first_tuned_ms: float      # the tuned build before this check's verdicts
    tuned_ms: float            # after them: what `autosched build` makes now
    tested: tuple[TaskVerdict, ...]
    declined: int              # tuned configs the final comparison declined (the tuned build was slower)
    runs: int                  # timed runs of each build per comparison
    threads: int
    kernels: tuple[KernelVerdict, ...] = ()  # the shortlists timed kernel by kernel, before the A/B tests

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
        """ms of each, timed in alternating blocks of `BLOCK` runs, each side for at least
        `MIN_SECONDS`: `b`'s median, and `a`'s as the rounds' ratio puts it against that
        (`paired_ratio`), so that a phase of the host that covers more of one side's blocks is not
        taken for a difference between the builds."""
        ins = [np.ascontiguousarray(self.feeds[v["name"]]) for v in a.inputs]
        outs = [[np.empty(v["shape"], np.dtype(v["dtype"])) for v in m.outputs] for m in (a, b)]
        rounds = alternate_rounds([lambda: a.run_into(ins, outs[0]), lambda: b.run_into(ins, outs[1])], runs,
                                  BLOCK, min_seconds=MIN_SECONDS)
        b_ms = 1e3 * float(np.median(joined(rounds, 2)[1]))
        return paired_ratio(rounds, 0, 1) * b_ms, b_ms

    def discard(self, models: list[Model]) -> None:
        for model in models:
            model.close()
            self.models.remove(model)

    def close(self) -> None:
        self.discard(list(self.models))


#: the profile the latency model keeps runs in blocks of `PROFILE_RUNS` runs, each after as
#: many plain runs of the build, for at least `PROFILE_SECONDS` in all (`_profile_window`)
PROFILE_RUNS = 5
PROFILE_SECONDS = 1.0


def _profile_window(model: Model, feeds: Mapping[str, np.ndarray], runs: int, seconds: float
                    ) -> tuple[list[KernelCall], float]:
    """(each kernel call's median seconds over the profile's blocks, the build's median plain run
    in ms), the two alternated in blocks of `runs` for at least `seconds`. On a 2-vCPU host whose
    second core comes and goes for seconds at a time, profile runs in a row fall in one phase:
    ResNet-18's 20 profile runs summed to 0.78-1.30x the median of the 20 plain runs just before
    them (EPYC Zen 3, 2 threads, eight pairs), and a tune's model check kept a kernel sum 1.19x
    its timed latency, so the latency model's executor time was none and its estimate 1.27x the
    build measured next. Alternated, the sum and the latency it is compared
    with see the same phases, and a second of them is closer to a typical one."""
    ins = [np.ascontiguousarray(feeds[v["name"]]) for v in model.inputs]
    outs = [np.empty(v["shape"], np.dtype(v["dtype"])) for v in model.outputs]
    blocks: list[list[KernelCall]] = []
    plain: list[float] = []
    start = time.perf_counter()
    while not blocks or time.perf_counter() - start < seconds:
        for _ in range(runs):
            t0 = time.perf_counter()
            model.run_into(ins, outs)
            plain.append(time.perf_counter() - t0)
        blocks.append(model.profile(feeds, runs=runs))
    calls = [replace(call, seconds=float(np.median([b[i].seconds for b in blocks]))) for i, call in enumerate(blocks[0])]
    return calls, 1e3 * float(np.median(plain))


def _keep_timings(db: Database, tasks: list[Task], target: Target, model: Model, feeds, schedules: TunedSchedules,
                  untuned_ms: float, threads: int, session: int | None) -> None:
    """Profile the build the check settled on and keep each task's time in it (per call, under
    the config it was built with) and the build's latency beside its kernels' sum, both from
    one window (`_profile_window`): the parts of the latency model
    (`autosched.database.model_times`)."""
    calls, tuned_ms = _profile_window(model, feeds, PROFILE_RUNS, PROFILE_SECONDS)
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


def kernel_verdicts(default_s: float, configs_s: Sequence[float], default_floor: float = 0.0,
                    config_floors: Sequence[float] = ()) -> tuple[bool | None, ...]:
    """Per shortlisted config, from kernel times in the model: the fastest wins if it beats the
    default by more than noise, and then configs slower than it by more than noise lose (so a
    build takes the winner over a config faster only alone); if none beats the default, those
    slower than the default by more than noise lose. Everything else is left unjudged.

    Each time is judged no lower than its floor (`streaming_floors`), and a config that reads
    more weight bytes than the default and wins on its measured time but not at its floor
    loses: it wins only while the host's memory is fast, and unjudged its time alone would
    build it (ResNet-18's 14x14 layers on F(4), 4x the filter's bytes: 0.87-0.88 of F(2)'s time
    in the model in quiet phases of a 2-vCPU EPYC, 1.14-1.20 in a slow one)."""
    floors = list(config_floors) or [0.0] * len(configs_s)
    judged = _verdicts(max(default_s, default_floor), [max(c, f) for c, f in zip(configs_s, floors)])
    measured = _verdicts(default_s, configs_s)
    return tuple(False if wins and not said and floor > default_floor else said
                 for wins, said, floor in zip(measured, judged, floors))


def _verdicts(default_s: float, configs_s: Sequence[float]) -> tuple[bool | None, ...]:
    j_best = min(range(len(configs_s)), key=lambda j: configs_s[j])
    fastest = configs_s[j_best]
    if fastest < (1 - IN_MODEL_NOISE) * default_s:
        return tuple(True if j == j_best else (False if c > (1 + IN_MODEL_NOISE) * fastest else None)
                     for j, c in enumerate(configs_s))
    return tuple(False if c > (1 + IN_MODEL_NOISE) * default_s else None for c in configs_s)


def streaming_floors(model: Model, cache_bytes: int) -> dict[str, float]:
    """Task key -> the seconds its kernel takes at least per call in `model` to read its weights at
    `MEMORY_BANDWIDTH`, where the model's weights exceed `cache_bytes` (else none: they stay in
    cache between runs). A kernel timed while the shared host gave it more bandwidth ran faster
    than that, but will not run so when the host gives less: ResNet-18's F(4) config of its 7x7
    512-channel layers, 37.7 MB of transformed weights a call, beat the default F(2) in the check
    (0.747 against 0.889 ms) and lost to it in the next hour (1.104 against 0.858), and the tuned
    build with it was 6-7% slower than the untuned one."""
    if model.manifest["weights_bytes"] <= cache_bytes:
        return {}
    keys = [t["key"] for t in model.manifest["tasks"]]
    per: dict[str, list[int]] = {}
    for call in model.manifest["calls"]:
        per.setdefault(keys[call["task"]], []).append(call.get("weight_bytes", 0))
    return {key: sum(b) / len(b) / MEMORY_BANDWIDTH for key, b in per.items()}


def _shortlists(db: Database, tasks: list[Task], target: Target, size: int) -> dict[str, list[Config]]:
    """Task key -> its `size` fastest configs timed on this machine that ran faster alone than its
    default (what a tune found; where the default was never timed, any), neither the default nor
    one the model judged a loss."""
    out: dict[str, list[Config]] = {}
    for task in tasks:
        try:
            default = get_template(task.op, target.kind).fallback(task, target)
        except TemplateError:
            continue
        if default is None:
            continue
        exclude = losers(db, task, target) | {config_text(default.to_json())}
        if configs := fastest(db, task, target, size, exclude, faster_than=default):
            out[task.key] = configs
    return out


def kernel_seconds(feeds: Mapping[str, np.ndarray], models: list[Model], rounds: int, runs: int) -> list[dict[str, float]]:
    """Per model, task key -> its kernel's seconds per call: the median over `rounds` rounds, each
    profiling every model in turn (`runs` runs each), so that the host's drift meets all alike."""
    samples: list[dict[str, list[float]]] = [{} for _ in models]
    for _ in range(rounds):
        for model, sample in zip(models, samples):
            keys = [t["key"] for t in model.manifest["tasks"]]
            per: dict[str, list[float]] = {}
            for call in model.profile(feeds, runs=runs):
                per.setdefault(keys[call.task], []).append(call.seconds)
            for key, seconds in per.items():
                sample.setdefault(key, []).append(sum(seconds) / len(seconds))
    return [{key: float(np.median(v)) for key, v in sample.items()} for sample in samples]


def _judge_shortlists(builds: _Builds, untuned: Model, tasks: list[Task], target: Target, db: Database, size: int,
                      rounds: int, runs: int, session: int | None) -> list[KernelVerdict]:
    """Time each task's shortlist in the model, kernel by kernel, and record the verdicts.

    Build j gives every task its j-th fastest config alone (its default where it has fewer), so
    `size` builds time every shortlist. A kernel's time in the model depends mostly on its own
    config: the convolutions' per-call medians moved by at most 6% between two loads of one
    ResNet-18 build (Xeon, 2 threads), where the whole model moved by up to 17%. So a task is
    judged on its own kernel, every task at once, where an A/B test of the whole model judges one
    task per pair of builds and only beyond the model's noise. A kernel is judged by the larger of
    its time and the time its weights take to stream at a low bandwidth (`streaming_floors`): a
    config that trades arithmetic for weight bytes wins only where it still wins when the shared
    host's memory is busy."""
    by_key = {t.key: t for t in tasks}
    lists = _shortlists(db, tasks, target, size)
    if not lists:
        return []

    def rank(j: int):
        def schedule_for(task: Task, tgt: Target):
            configs = lists.get(task.key, ())
            if j < len(configs):
                return get_template(task.op, tgt.kind).apply(task, configs[j], tgt)
            return default_kernel(task, tgt)
        return schedule_for

    variants = [builds.build(rank(j)) for j in range(max(map(len, lists.values())))]
    times = kernel_seconds(builds.feeds, [untuned, *variants], rounds, runs)
    # a GPU's memory is its own, not a shared host's: no floors there
    cpu = isinstance(target.capabilities, CpuCapabilities)
    floors = [streaming_floors(m, llc_bytes()) if cpu else {} for m in (untuned, *variants)]
    builds.discard(variants)  # each holds the model's weights
    out: list[KernelVerdict] = []
    for key, configs in lists.items():
        default_s = times[0].get(key)
        if default_s is None or default_s < MIN_JUDGED_S:
            continue
        configs_s = [times[1 + j][key] for j in range(len(configs))]
        config_floors = [floors[1 + j].get(key, 0.0) for j in range(len(configs))]
        said = kernel_verdicts(default_s, configs_s, floors[0].get(key, 0.0), config_floors)
        default_s = max(default_s, floors[0].get(key, 0.0))  # recorded as judged
        configs_s = [max(c, f) for c, f in zip(configs_s, config_floors)]
        for config, seconds, wins in zip(configs, configs_s, said):
            if wins is not None:
                record_verdict(db, by_key[key], target, config, Verdict(wins, 1e3 * seconds, 1e3 * default_s, session))
        out.append(KernelVerdict(key, by_key[key].op, 1e3 * default_s, tuple(1e3 * c for c in configs_s), said))
    return out


def check_in_model(graph: Graph, tasks: list[Task], target: Target, db: Database, fallback: Database | None = None,
                   ab_tasks: int = 3, runs: int = 20, threads: int | None = None,
                   session: int | None = None, shortlist: int = SHORTLIST) -> ModelCheck:
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
            kernels = _judge_shortlists(builds, untuned, tasks, target, db, shortlist, KERNEL_ROUNDS,
                                        max(1, runs // KERNEL_ROUNDS), session) if shortlist > 0 else []
            if any(v is not None for k in kernels for v in k.verdicts):
                schedules = TunedSchedules(db, fallback)  # with the kernels' verdicts
                tuned = builds.build(schedules)
            gains = {key: gain for key, found in schedules.used.items()
                     if key in by_key and (gain := estimated_gain(db, by_key[key], target, found)) is not None}
            # a task its own kernel judged is not judged again by the whole model's noise: a ResNet-18
            # classifier 30% faster in the model "lost" an A/B test by 9% of the model's latency
            by_kernel = {k.task for k in kernels if (found := schedules.used.get(k.task)) is not None
                         and verdict_of(db, by_key[k.task], target, found.config) is not None}
            ranked = sorted((k for k in gains if k not in by_kernel), key=lambda k: -gains[k])[:ab_tasks]
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
                judged = {v.task for v in tested if v.wins} | by_kernel
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
            if judge(tuned_ms, untuned_ms) is False:  # confirmed over more runs before it decides
                untuned_ms, tuned_ms = builds.time(untuned, tuned, 3 * runs)
            if judge(tuned_ms, untuned_ms) is False:
                # slower beyond noise with only the configs judged wins: their wins, each judged in a build
                # of its own, do not add up in this one (benchmarks/tuning.py timed ResNet-18's 250-trial
                # tuned build at 1.07x its untuned one on a Xeon, after the check had declined the rest)
                kept = [(key, found) for key, found in final.used.items() if key in by_key]
                for key, found in kept:
                    record_verdict(db, by_key[key], target, found.config, Verdict(False, tuned_ms, untuned_ms, session))
                declined += len(kept)
                log.warning("the tuned build still ran slower than the untuned one in the model (%.3f vs %.3f ms): "
                            "its %d tuned configs judged wins alone are declined too", tuned_ms, untuned_ms, len(kept))
                final = TunedSchedules(db, fallback)
                tuned = builds.build(final)
                untuned_ms, tuned_ms = builds.time(untuned, tuned, runs)
            _keep_timings(db, tasks, target, tuned, builds.feeds, final, untuned_ms, threads, session)
        finally:
            builds.close()
    return ModelCheck(untuned_ms, first_ms, tuned_ms, tuple(tested), declined, runs, threads, tuple(kernels))
