"""The tuning loop shared by every strategy.

`Tuner.tune` owns the budget in one place: it asks the strategy for candidate
indices, drops any already measured, measures them, tracks the best and stops
early. Strategies only propose (`_propose`) and learn (`_observe`). `ask` and
`tell` are the loop's two halves, for a caller that keeps a batch in flight
while it asks for the next (the task scheduler on a pipelined runner).

Tuners of the same task in other processes (or on other drivers of a fleet) are
`Peers`: a tuner that has them claims every config before it is measured and
proposes another in place of one they hold or have measured, and learns from
their records as they arrive, before each cost-model fit.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from autosched.errors import AutoschedError
from autosched.interrupts import check
from autosched.measure import MeasureBatch, MeasureInput, MeasureResult, Record, RecordError, TaskLike
from autosched.space import Config, ConfigSpace
from autosched.target import Target
from autosched.tuner.options import BaseOptions, parse_options

Callback = Callable[[Sequence[MeasureInput], Sequence[MeasureResult]], None]


class Peers(Protocol):
    """The other tuners of the same tasks, met through a shared store (the tuning database's
    `SharedTuning`); tuners never see the store itself."""

    def claim(self, inputs: Sequence[MeasureInput]) -> list[bool]:
        """Take each config for this tuner; False where a peer holds it or has measured it."""

    def arrived(self, task: TaskLike, space: ConfigSpace, target: Target) -> list[Record]:
        """The peers' records of `task` in `space` committed since the last call."""

    def abandoned(self, task: TaskLike, space: ConfigSpace, target: Target) -> list[int]:
        """Configs of `space` claimed by peers that died before measuring them."""


class TunerError(AutoschedError):
    """A tuning request that cannot be honoured: no budget, unknown strategy."""


@dataclass(frozen=True)
class TuneSummary:
    """What one `tune` call did. `best` is over the tuner's whole life."""

    trials: int  # measured in this call
    best: Config | None
    best_cost: float  # seconds; inf when nothing has succeeded
    stopped_early: bool
    search_s: float = 0.0  # spent proposing and learning (cost model fits), not measuring


class Tuner(ABC):
    """Searches one task's space. Stateful across `tune` calls: a second call
    continues where the first stopped and never re-measures a config."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseOptions]] = BaseOptions

    def __init__(self, task: TaskLike, space: ConfigSpace, target: Target, *, seed: int = 0, **options: Any) -> None:
        self.task = task
        self.space = space
        self.target = target
        self.options = parse_options(self.Options, options, self.name)
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.best: Config | None = None
        self.best_cost = math.inf
        self._queued: list[int] = []  # measured before anything the strategy proposes
        self._learned: set[int] = set()  # configs whose results the strategy has been told
        self.search_s = 0.0  # spent proposing and learning so far (cost model fits), not measuring
        self.peers: Peers | None = None
        self.admit: Callable[[Config], Config | None] | None = None
        self.refused = 0  # proposals `admit` refused or folded into a visited config: never measured

    def restrict(self, admit: Callable[[Config], Config | None] | None) -> None:
        """Measure each proposal as `admit` maps it (`templates.config_filter`; None: as proposed):
        to None where the template refuses to build it, which would spend a trial on an error,
        and to one config per kernel where knobs its algorithm ignores make many configs of one
        kernel, which would spend trials timing that kernel again."""
        self.admit = admit

    def queue(self, indices: Sequence[int]) -> None:
        """Measure these configs first (e.g. the untuned build's config, so a tuned build is
        never slower than an untuned one); those already measured are skipped."""
        self._queued.extend(int(i) for i in indices)

    def share_with(self, peers: Peers) -> None:
        """Tune beside `peers` from now on; the configs dead peers left claimed are measured first."""
        self.peers = peers
        self.queue(peers.abandoned(self.task, self.space, self.target))

    @abstractmethod
    def _propose(self, n: int) -> list[int]:
        """Up to `n` unvisited indices to measure next; [] when the strategy is done."""

    def _observe(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:  # noqa: B027
        """Learn from a measured batch (visited and best are already updated); an optional hook,
        empty for the strategies that learn nothing."""

    def load_history(self, records: Sequence[Record]) -> None:
        """Start from earlier measurements of this task (a resumed run): they count as visited,
        can be the best, and teach the strategy as a measured batch would; none is measured again."""
        fresh = self._unlearned(records)
        if fresh:
            self._observe([inp for inp, _ in fresh], [res for _, res in fresh])

    def _unlearned(self, records: Sequence[Record]) -> list[Record]:
        """Records of configs the strategy has not been told about (one per config), now counted
        visited, learned, and considered for the best."""
        fresh: dict[int, Record] = {}
        for inp, res in records:
            if inp.config.space != self.space:
                raise TunerError(f"a history record's config is from space {inp.config.space.fingerprint}, "
                                 f"not this tuner's {self.space.fingerprint}")
            if inp.config.index not in self._learned:
                fresh[inp.config.index] = (inp, res)
        for inp, res in fresh.values():
            self.visited.add(inp.config.index)
            self._learned.add(inp.config.index)
            if res.ok and res.cost < self.best_cost:
                self.best, self.best_cost = inp.config, res.cost
        return list(fresh.values())

    def tune(self, n_trials: int, measure_batch: MeasureBatch, callbacks: Sequence[Callback] = (),
             early_stopping: int | None = None) -> TuneSummary:
        """Measure up to `n_trials` new configs; stop after `early_stopping` trials
        of this call without a new best, or when the space is exhausted."""
        if type(n_trials) is not int or n_trials <= 0:
            raise TunerError(f"n_trials must be a positive int, got {n_trials!r}")
        if early_stopping is not None and (type(early_stopping) is not int or early_stopping <= 0):
            raise TunerError(f"early_stopping must be a positive int or None, got {early_stopping!r}")
        done, last_gain, searched = 0, 0, self.search_s
        while done < n_trials:
            check()
            if early_stopping is not None and done - last_gain >= early_stopping:
                return TuneSummary(done, self.best, self.best_cost, stopped_early=True,
                                   search_s=self.search_s - searched)
            inputs = self.ask(min(self.options.batch_size, n_trials - done))
            if not inputs:
                break
            results = measure_batch(inputs)
            gain = self.tell(inputs, results)
            last_gain = done + gain if gain else last_gain
            done += len(inputs)
            for callback in callbacks:
                callback(inputs, results)
        return TuneSummary(done, self.best, self.best_cost, stopped_early=False, search_s=self.search_s - searched)

    def ask(self, n: int) -> list[MeasureInput]:
        """Up to `n` configs to measure next, queued ones first ([] when the strategy is done).
        They count as visited from now on, so a batch asked for while an earlier one is still
        being measured never repeats it. With peers, each is claimed first: one a peer holds or
        has measured counts as visited too, and the strategy proposes another in its place."""
        start, claiming = time.perf_counter(), 0.0
        pending = self._fresh(self._queued)
        proposal, self._queued = pending[:n], pending[n:]
        out: list[MeasureInput] = []
        while len(out) < n:
            want = n - len(out)
            indices = self._fresh(proposal + self._propose(want - len(proposal)))[:want]
            proposal = []
            if not indices:
                break
            self.visited.update(indices)
            if self.admit is not None:
                indices = self._admitted(indices)
                if not indices:
                    continue
            inputs = [MeasureInput(self.task, self.target, self.space.get(i)) for i in indices]
            if self.peers is None:
                out += inputs
                break
            claimed = time.perf_counter()
            granted = self.peers.claim(inputs)
            claiming += time.perf_counter() - claimed
            out += [inp for inp, ok in zip(inputs, granted) if ok]
        self.search_s += time.perf_counter() - start - claiming
        return out

    def tell(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> int:
        """Learn from a measured batch that `ask` gave; returns the position (1-based) of its
        last new best, 0 when it found none."""
        if len(results) != len(inputs):
            raise RecordError(f"measure_batch returned {len(results)} results for {len(inputs)} inputs")
        gain = 0
        for position, (inp, res) in enumerate(zip(inputs, results), 1):
            self._learned.add(inp.config.index)
            if res.ok and res.cost < self.best_cost:
                self.best, self.best_cost, gain = inp.config, res.cost, position
        arrived = self._unlearned(self.peers.arrived(self.task, self.space, self.target)) if self.peers else []
        start = time.perf_counter()
        self._observe([*inputs, *(inp for inp, _ in arrived)], [*results, *(res for _, res in arrived)])
        self.search_s += time.perf_counter() - start
        return gain

    def _admitted(self, indices: Sequence[int]) -> list[int]:
        """The configs `admit` maps `indices` (visited already) to, each at most once and none
        visited before."""
        assert self.admit is not None
        out: list[int] = []
        for i in indices:
            config = self.admit(self.space.get(i))
            if config is not None and (config.index == i or config.index not in self.visited):
                self.visited.add(config.index)
                out.append(config.index)
            else:
                self.refused += 1
        return out

    def _fresh(self, proposed: Sequence[int]) -> list[int]:
        """Proposals minus anything measured or repeated: the loop, not each
        strategy, guarantees that nothing is measured twice."""
        out: dict[int, None] = {}
        for i in proposed:
            if i not in self.visited:
                out.setdefault(int(i), None)
        return list(out)

