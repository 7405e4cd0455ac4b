"""Splitting a model's trial budget across its tasks.

Trials go in rounds. Every tunable task gets one round first (largest share of the model's
FLOPs first), so each has a measured best; after that each round goes to the task that costs
the model most time now, weight × best time (the one whose improvement cuts end-to-end latency
most), discounted by how many rounds in a row it has not improved ("costliest"), or to the task
with the steepest expected decrease of the model's latency per trial ("gradient", Ansor's from
its own curve and share only, see `gradient_priority`; the default: on ResNet-18 at
250/500/1000 trials, AVX-512, Ansor's full formula gave an estimated latency of 4.83/4.37/4.32 ms
against costliest's 5.65/4.91/4.74, and measured tuned builds of 0.73/0.76/0.78 × onnxruntime
against 0.78/0.85/0.94, benchmarks/tuning.py). A task whose space is
exhausted, or whose candidates all fail, drops out. Each task keeps one tuner for the whole
run, so its cost model keeps learning across rounds.

A run can resume from `history` (earlier records by task key, e.g. from the tuning log): each
task's tuner starts from its own records (a task with a logged best skips the first round),
and model-based tuners also train on the records of the model's other tasks with the same
template (transfer), so a task never tuned before starts from a trained cost model. A task's
first trial is its template's fallback config (what an untuned build uses), so tuning never
ends slower than not tuning.

With `peers` (other tuners on the same database, `autosched.tuner.base.Peers`), every tuner
claims its configs before they are measured, so concurrent runs never measure a config twice,
and learns from the others' records as they arrive.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from autosched.interrupts import check
from autosched.measure import Builder, MeasureBatch, MeasureInput, MeasureResult, Record, Runner, measure_with
from autosched.measure.interface import PipelinedRunner
from autosched.space import Config
from autosched.target import Target
from autosched.task import Task
from autosched.templates import TemplateError, config_filter, get_template
from autosched.tuner.base import Callback, Peers, Tuner, TunerError
from autosched.tuner.model_based import ModelBasedTuner
from autosched.tuner.registry import get_tuner


@dataclass
class TaskProgress:
    task: Task
    tuner: Tuner
    trials: int = 0
    best: Config | None = None
    best_cost: float = math.inf
    exhausted: bool = False
    stale_rounds: int = 0  # rounds in a row that found nothing faster
    previous_cost: float = math.inf  # best before the last round
    last_round: int = 0  # trials of the last round
    # the task's kernel in the model over the same kernel alone, where a model check profiled both
    # (`autosched.database.model_times.context_factors`): weights evicted by the kernels before it
    context: float = 1.0
    # the task's default config, timed once more beside each of its rounds (None: not re-timed)
    reference: MeasureInput | None = None

    @property
    def model_seconds(self) -> float:
        """This task's share of one inference at its best so far (weight × time × context)."""
        return self.task.weight * self.best_cost * self.context

    @property
    def priority(self) -> float:
        """Model time, discounted by the rounds that did not lower it: the task that costs
        most is not the one to tune when tuning stopped paying there (a best measured on a
        quieter machine, a search converged), and the others then get their turn."""
        return self.model_seconds / (1 + self.stale_rounds)


#: weight of the backward (observed) rate against the optimistic forward estimate (Ansor's α,
#: Zheng et al., OSDI 2020, §6)
GRADIENT_ALPHA = 0.2


def costliest_priority(p: TaskProgress, progress: Sequence[TaskProgress]) -> float:
    """The task costing the model most time, discounted by its rounds without improvement."""
    return p.priority


def gradient_priority(p: TaskProgress, progress: Sequence[TaskProgress]) -> float:
    """How fast one more trial of `p` is expected to cut the model's latency, from the task's own
    curve and its share of the model's time: weight × (α × the rate of its last round + (1 − α) ×
    its best time over its trials so far). Ansor's third term, the task's gap to the best
    throughput a task of the same op has reached, is left out: a shape that cannot reach high
    GFLOP/s (a first convolution with 3 input channels) is not a shape with much to gain, and
    that term gave such a convolution of a VGG-style model 256 of 400 trials while the four
    convolutions making 90% of its time got 16-32 each (issue 18)."""
    if not math.isfinite(p.best_cost):
        return math.inf
    backward = 0.0
    if math.isfinite(p.previous_cost) and p.last_round:
        backward = (p.previous_cost - p.best_cost) / p.last_round
    forward = p.best_cost / max(p.trials, 1)
    return p.task.weight * p.context * (GRADIENT_ALPHA * backward + (1 - GRADIENT_ALPHA) * forward)


#: how the task scheduler picks the next round's task after every task had its first
SCHEDULERS = {"costliest": costliest_priority, "gradient": gradient_priority}


@dataclass(frozen=True)
class ScheduleSummary:
    progress: tuple[TaskProgress, ...]
    skipped: tuple[tuple[Task, str], ...] = field(default=())  # tasks not tuned, and why

    @property
    def trials(self) -> int:
        return sum(p.trials for p in self.progress)


def tunable(tasks: Sequence[Task], target: Target) -> tuple[list[Task], list[tuple[Task, str]]]:
    """Tasks that have a template for the target and do arithmetic; the rest with the reason."""
    keep, skipped = [], []
    for task in tasks:
        try:
            get_template(task.op, target.kind)
        except TemplateError:
            skipped.append((task, f"no template for {task.op} on {target.kind}: default schedule"))
            continue
        if task.flops == 0:
            skipped.append((task, "no arithmetic: default schedule"))
            continue
        keep.append(task)
    return keep, skipped


def _start(task: Task, target: Target, tuner: str, seed: int, history: Mapping[str, Sequence[Record]],
           peers: Peers | None) -> TaskProgress:
    template = get_template(task.op, target.kind)
    space = template.space(task, target)
    tuner_cls = get_tuner(tuner)
    options = {}
    if issubclass(tuner_cls, ModelBasedTuner):
        options["transfer"] = [rec for key, recs in history.items() if key != task.key for rec in recs
                               if rec[0].config.space.template == space.template]
    search = tuner_cls(task, space, target, seed=seed, **options)
    search.restrict(config_filter(template, task, target))
    search.load_history(history.get(task.key, ()))
    if peers is not None:
        search.share_with(peers)
    fallback = template.fallback(task, target)
    if fallback is not None:
        search.queue([fallback.index])
    reference = None if fallback is None or target.emulated else MeasureInput(task, target, fallback)
    return TaskProgress(task, search, best=search.best, best_cost=search.best_cost, reference=reference)


def with_reference(p: TaskProgress, inputs: Sequence[MeasureInput]) -> list[MeasureInput]:
    """A round's batch with the task's default appended, unless the batch holds it already.

    Why: on a shared host a timing can fall in a phase where a core is taken (two threads then
    ran a GEMM no faster than one for 0.5-3.5 s at a time, `benchmarks/host.py`), and a config
    timed once may carry that phase for the whole tune. The default is what every tuned config
    is weighed against (the model check's shortlist, a build's trust in an isolated win), by its
    fastest timing: re-timed in every round, that is a timing from the host's usual state."""
    ref = p.reference
    if ref is None or any(inp.config.index == ref.config.index for inp in inputs):
        return list(inputs)
    return [*inputs, ref]


def without_reference(inputs: Sequence[MeasureInput], measured: Sequence[MeasureInput],
                      results: Sequence[MeasureResult], callbacks: Sequence[Callback]) -> list[MeasureResult]:
    """The results of `inputs` out of those of `measured` (`with_reference`'s batch); the
    default's re-timing goes to the callbacks that record it (a `reference(inp, res)` method),
    never to the tuner or the trial count."""
    if len(measured) == len(inputs):
        return list(results)
    for callback in callbacks:
        if hasattr(callback, "reference"):
            callback.reference(measured[-1], results[-1])
    return list(results[:len(inputs)])


def check_arguments(trials: int, tuner: str, scheduler: str) -> None:
    """Refuse a budget, tuner or scheduler `tune_tasks` cannot use; callers check before they
    open or write a database, so a refused tune leaves nothing behind."""
    get_tuner(tuner)
    if type(trials) is not int or trials <= 0:
        raise TunerError(f"trials must be a positive int, got {trials!r}")
    if scheduler not in SCHEDULERS:
        raise TunerError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")


def tune_tasks(tasks: Sequence[Task], target: Target | str, trials: int, builder: Builder, runner: Runner,
               tuner: str = "xgb", round_trials: int = 16, callbacks: Sequence[Callback] = (),
               seed: int = 0, history: Mapping[str, Sequence[Record]] | None = None,
               scheduler: str = "gradient", peers: Peers | None = None,
               context: Mapping[str, float] | None = None) -> ScheduleSummary:
    """Spend `trials` new measurements over `tasks`, in rounds of `round_trials`, starting
    from `history` (task key → earlier records of that task on this target); after the first
    rounds, `scheduler` (a name in SCHEDULERS) picks each round's task. Callbacks with a
    `searched(seconds)` method hear, after each round, how long its tuner spent proposing and
    learning (the cost model's share of the tuning time). `peers`: claim every config before it
    is measured and learn from their records (other tuners of these tasks at work beside this).
    `context` (task key → in-model over isolated time) scales each task's share of the model's
    time, so that the scheduler weighs what the tasks cost in the model, not alone."""
    check_arguments(trials, tuner, scheduler)
    priority = SCHEDULERS[scheduler]
    target = Target.parse(target) if isinstance(target, str) else target
    chosen, skipped = tunable(tasks, target)
    progress = [_start(t, target, tuner, seed, history or {}, peers) for t in sorted(chosen, key=lambda t: -t.flops * t.weight)]
    for p in progress:
        p.context = (context or {}).get(p.task.key, 1.0)
    rounds = Rounds(progress, round_trials, priority)
    if isinstance(runner, PipelinedRunner):
        _overlapped_rounds(rounds, trials, builder, runner, list(callbacks))
    else:
        _rounds(rounds, trials, measure_with(builder, runner), list(callbacks))
    return ScheduleSummary(tuple(progress), tuple(skipped))


@dataclass
class Rounds:
    """Which task gets the next round, and the bookkeeping after a round."""

    progress: list[TaskProgress]
    round_trials: int
    priority: Callable[[TaskProgress, Sequence[TaskProgress]], float]
    first_round: list[TaskProgress] = field(init=False)

    def __post_init__(self) -> None:
        # a first round for each task without a measured best (a resumed task already has one)
        self.first_round = [p for p in self.progress if p.best is None]

    def pick(self) -> TaskProgress | None:
        live = [p for p in self.progress if not p.exhausted]
        if not live:
            return None
        return self.first_round.pop(0) if self.first_round else max(live, key=lambda q: self.priority(q, self.progress))

    def account(self, p: TaskProgress, trials: int, best: Config | None, best_cost: float) -> None:
        p.trials += trials
        p.stale_rounds = 0 if best_cost < p.best_cost else p.stale_rounds + 1
        p.previous_cost, p.last_round = p.best_cost, trials
        p.best, p.best_cost = best, best_cost
        # a space with nothing left, or one where nothing has worked after two rounds
        p.exhausted = p.exhausted or trials == 0 or (p.best is None and p.trials >= 2 * self.round_trials)


def _rounds(rounds: Rounds, trials: int, measure: MeasureBatch, callbacks: list[Callback]) -> None:
    """One round at a time, each the picked task's `Tuner.tune`."""
    spent = 0
    while spent < trials:
        p = rounds.pick()
        if p is None:
            break
        summary = p.tuner.tune(min(rounds.round_trials, trials - spent), _referenced(measure, p, callbacks), callbacks)
        _searched(callbacks, summary.search_s)
        spent += summary.trials
        rounds.account(p, summary.trials, summary.best, summary.best_cost)


def _referenced(measure: MeasureBatch, p: TaskProgress, callbacks: list[Callback]) -> MeasureBatch:
    def batch(inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        measured = with_reference(p, inputs)
        return without_reference(inputs, measured, measure(measured), callbacks)
    return batch


def _searched(callbacks: list[Callback], seconds: float) -> None:
    """Tell the callbacks that keep it (the database's writer) a round's search time."""
    for callback in callbacks:
        if hasattr(callback, "searched"):
            callback.searched(seconds)


#: rounds a pipelined runner holds at once: the one timed now and the next, building
ROUNDS_IN_FLIGHT = 2


def _overlapped_rounds(rounds: Rounds, trials: int, builder: Builder, runner: PipelinedRunner,
                       callbacks: list[Callback]) -> None:
    """Rounds of one batch each, the next one submitted (its builds started) before the driver
    waits for the current one, so builders work on round k+1 while the devices time round k.
    The price is one round of lag: round k+1's task and configs are chosen without round k's
    results. Nothing is measured twice (a config is visited from the moment `ask` gives it),
    and every round is told and recorded in the order it was submitted."""
    spent = 0  # trials submitted
    in_flight: deque[tuple[TaskProgress, list[MeasureInput], list[MeasureInput], int, float]] = deque()
    # (task, its inputs, the inputs measured: with its default, ticket, asking s)
    while True:
        check()
        while len(in_flight) < ROUNDS_IN_FLIGHT and spent < trials:
            p = rounds.pick()
            if p is None:
                break
            searched = p.tuner.search_s
            inputs = p.tuner.ask(min(rounds.round_trials, trials - spent))
            if not inputs:  # its space has nothing left
                p.exhausted = True
                continue
            spent += len(inputs)
            measured = with_reference(p, inputs)
            in_flight.append((p, inputs, measured, runner.submit(builder, measured), p.tuner.search_s - searched))
        if not in_flight:
            return
        p, inputs, measured, ticket, asking_s = in_flight.popleft()
        results = without_reference(inputs, measured, runner.wait(ticket), callbacks)
        searched = p.tuner.search_s
        p.tuner.tell(inputs, results)
        for callback in callbacks:
            callback(inputs, results)
        _searched(callbacks, asking_s + p.tuner.search_s - searched)
        rounds.account(p, len(inputs), p.tuner.best, p.tuner.best_cost)


__all__ = ["SCHEDULERS", "TaskProgress", "ScheduleSummary", "costliest_priority", "gradient_priority", "tunable",
           "tune_tasks"]
