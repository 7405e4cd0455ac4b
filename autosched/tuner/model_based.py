"""Model-based search: a cost model trained on measured configs picks what to
measure next (AutoTVM's XGBTuner shape).

Each plan is `plan_size` configs: the best predicted by simulated annealing
over the model, except an `epsilon` share drawn at random so regions the model
has never seen still get measured. The model is refit, and the plan redrawn,
after every `plan_size` new results. Until the first fit, plans are random;
records of other tasks of the same template (`transfer`) fit it from the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autosched.measure import MeasureInput, MeasureResult, Record, TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target
from autosched.tuner.annealing import anneal
from autosched.tuner.base import Tuner
from autosched.tuner.options import BaseOptions, require
from cost_models import COST_MODELS, FEATURES, CostModel, create_cost_model


@dataclass(frozen=True)
class ModelBasedOptions(BaseOptions):
    # Configs planned per model fit. AutoTVM used 64; refitting every 16 results cut the
    # median trials to 90% of the best on matmul 1024³ from 133 (random) to 52, where 64
    # left the first 64 trials random and the model a step behind (benchmarks/search.py).
    plan_size: int = 16
    # Random share of each plan. AutoTVM used 0.05; on tests/synthetic.py (128
    # trials, 20 seeds) that left 5 runs in a basin 1.4x off the optimum, 0.25 left 3.
    epsilon: float = 0.25
    model: str = "xgb-rank"  # a name in cost_models.COST_MODELS
    features: str = "knob"  # a name in cost_models.FEATURES; "loop" ones lower every config (ms each)
    sa_chains: int = 128  # parallel annealing walks
    sa_iters: int = 500  # annealing steps per plan, at most
    sa_patience: int = 50  # steps without a new top candidate before annealing stops

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.plan_size >= 1, f"plan_size must be >= 1, got {self.plan_size}")
        require(0.0 <= self.epsilon <= 1.0, f"epsilon must be in [0, 1], got {self.epsilon}")
        require(self.model in COST_MODELS, f"unknown model {self.model!r}; known: {', '.join(COST_MODELS)}")
        require(self.features in FEATURES, f"unknown features {self.features!r}; known: {', '.join(FEATURES)}")
        for name in ("sa_chains", "sa_iters", "sa_patience"):
            require(getattr(self, name) >= 1, f"{name} must be >= 1, got {getattr(self, name)}")


class ModelBasedTuner(Tuner):
    name = "xgb"
    Options = ModelBasedOptions
    options: ModelBasedOptions

    def __init__(self, task: TaskLike, space: ConfigSpace, target: Target, *, seed: int = 0,
                 transfer: Sequence[Record] = (), **options: Any) -> None:
        super().__init__(task, space, target, seed=seed, **options)
        self.model: CostModel = create_cost_model(self.options.model, task, space, features=self.options.features,
                                                  seed=seed, target=target)
        self._transfer = tuple(transfer)
        self._records: list[Record] = []
        self._new_results = 0  # since the last fit
        self._plan: list[int] = []
        self._fitted = any(res.ok for _, res in self._transfer)
        if self._fitted:
            self.model.fit((), self._transfer)

    def _propose(self, n: int) -> list[int]:
        if not self._plan:
            self._plan = self._make_plan()
        out, self._plan = self._plan[:n], self._plan[n:]
        return out

    def _make_plan(self) -> list[int]:
        size = self.options.plan_size
        if not self._fitted:
            return self.space.sample(size, self.rng, exclude=self.visited)
        ok = sorted((res.cost, inp.config.index) for inp, res in self._records if res.ok)
        starts = [i for _, i in ok[: self.options.sa_chains // 2]]
        n_model = size - round(self.options.epsilon * size)
        planned = anneal(self.space, self.model.predict, n_best=n_model, rng=self.rng, exclude=self.visited,
                         starts=starts, chains=self.options.sa_chains, iters=self.options.sa_iters,
                         patience=self.options.sa_patience)
        return planned + self.space.sample(size - len(planned), self.rng, exclude=self.visited | set(planned))

    def _observe(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self._records.extend(zip(inputs, results))
        self._new_results += len(results)
        if self._new_results >= self.options.plan_size and any(res.ok for _, res in self._records):
            self.model.fit(self._records, self._transfer)
            self._fitted, self._new_results, self._plan = True, 0, []
