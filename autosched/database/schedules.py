"""A build's `schedule_for` over the database: each task's best valid config, else the best of a
fallback database (the shipped records), else the default schedule. A best config is built only
if the model did not judge it a loss and, where it was never judged, it beats the default by
more than in-model noise (`autosched.database.verdicts`); otherwise the fastest config the model
judged a win is built, else the default."""
from __future__ import annotations

import logging

from autosched.compile.model import default_kernel
from autosched.database.queries import Best, best, config_cost, other_isas
from autosched.database.store import Database
from autosched.database.verdicts import IN_MODEL_NOISE, verdict_of, winners
from autosched.schedule import Schedule
from autosched.target import CpuCapabilities, Target, vendor_of_model
from autosched.task import Task
from autosched.templates import get_template

log = logging.getLogger("autosched.database")


def _device(fingerprint: str) -> str:
    """The CPU or GPU model a fingerprint names (its architecture where it names none)."""
    parts = fingerprint.split("|")
    return parts[1] if len(parts) > 1 else fingerprint


def difference(found: str, here: str) -> str:
    """What tells the fingerprint of a record's machine from this one's, in words: the device
    models, else (one model, as two cloud instances of one CPU often are) the CPU extensions
    one has and the other lacks, else the target options."""
    if _device(found) != _device(here):
        return f"{_device(found)}, this is {_device(here)}"
    theirs, ours = found.split("|"), here.split("|")
    if len(theirs) > 2 and len(ours) > 2 and theirs[2] != ours[2]:
        a, b = set(theirs[2].split(",")), set(ours[2].split(","))
        told = [f"{name} {', '.join(sorted(flags))}" for name, flags in (("with", a - b), ("without", b - a)) if flags]
        return f"{_device(found)} {' and '.join(told)}, unlike this one"
    return f"{_device(found)} with target options {'|'.join(theirs[3:]) or 'none'}, here {'|'.join(ours[3:]) or 'none'}"


_VENDORS = {"amd": "AMD", "intel": "Intel"}


class TunedSchedules:
    """Called by `build_model` once per task; `used` maps each task that got a tuned config to
    the record it came from, `other_isa` each task whose only records are for other ISAs to
    those ISAs (for the caller to say so once), `declined` each task built on its default
    because its best config lost in the model or won alone by too little (and no other config of
    it won in the model), to that record; `superseded` each task built instead with the fastest
    of its configs the model judged a win, to the best record it replaced.
    `default_for` names tasks to build on their default whatever the database holds (the
    model's A/B tests)."""

    def __init__(self, db: Database, fallback: Database | None = None, default_for: frozenset[str] = frozenset()) -> None:
        self.db, self.fallback, self.default_for = db, fallback, default_for
        self.used: dict[str, Best] = {}
        self.declined: dict[str, Best] = {}
        self.superseded: dict[str, Best] = {}  # tasks built with a config the model judged a win, not their best
        self.from_fallback: set[str] = set()  # tasks whose record came from `fallback`
        self.other_vendor: set[str] = set()  # tasks whose `fallback` record another vendor's CPU measured
        self.other_isa: dict[str, set[str]] = {}
        self.static: set[str] = set()  # tasks built from a static estimate (no GPU timing of them)
        self._noticed: set[str] = set()

    def __call__(self, task: Task, target: Target) -> tuple[Schedule, list]:
        found = self.choose(task, target)
        if found is None:
            return default_kernel(task, target)
        return get_template(task.op, target.kind).apply(task, found.config, target)

    def choose(self, task: Task, target: Target) -> Best | None:
        """The record whose config a build of `task` uses, or None for its default schedule."""
        if task.key in self.default_for:
            return None
        found = best(self.db, task, target)
        if found is None and self.fallback is not None:
            found = self._from_fallback(task, target)
        if found is None:
            isas = other_isas(self.db, task, target)
            if isas:
                self.other_isa[task.key] = isas
            return None
        if found.static_estimate:
            if not self.static:
                log.warning("%s: no GPU timings for some tasks; they use the best static estimate of an emulated "
                            "tune (tune on a GPU for measured schedules)", self.db.location)
            self.static.add(task.key)
        unnamed_gpu = target.kind == "cuda" and target.gpu is None  # a build names no GPU: any of its arch fits
        if (not found.static_estimate and found.fingerprint != target.fingerprint and found.fingerprint not in self._noticed
                and task.key not in self.from_fallback and not unnamed_gpu):
            self._noticed.add(found.fingerprint)
            log.warning("%s: some tasks use records measured on another %s of the same ISA (%s); "
                        "tune here for schedules fitted to this one", self.db.location,
                        "GPU" if target.kind == "cuda" else "CPU", difference(found.fingerprint, target.fingerprint))
        if not self._trusted(task, target, found, get_template(task.op, target.kind).fallback(task, target)):
            # the fastest config the model did judge a win (an earlier tune's best, typically) beats
            # falling back to a default that lost to it in the model
            winner = best(self.db, task, target, among=winners(self.db, task, target))
            if winner is None:
                self.declined[task.key] = found
                return None
            self.superseded[task.key] = found
            found = winner
        self.used[task.key] = found
        return found

    def _from_fallback(self, task: Task, target: Target) -> Best | None:
        """The fallback's (the shipped records') best record of `task`, unless it was measured on
        another vendor's cores than the target's: a config tuned on AMD's cores ran slower than
        the default on Intel's (AVX-512, 2 threads: ResNet-18 1.05×, BERT 1.05×, MobileNetV2 1.03×
        the untuned build's time), so there the default stands in for it."""
        assert self.fallback is not None
        found = best(self.fallback, task, target)
        if found is None:
            return None
        ours = target.capabilities.vendor if isinstance(target.capabilities, CpuCapabilities) else None
        parts = found.fingerprint.split("|")
        theirs = vendor_of_model(parts[1]) if found.fingerprint.startswith("llvm|") and len(parts) > 1 else None
        if ours and theirs and ours != theirs:
            if not self.other_vendor:
                log.warning("the shipped records were measured on %s's cores; on this %s CPU their tasks use "
                            "their default schedules (tune here for schedules fitted to it)",
                            _VENDORS[theirs], _VENDORS[ours])
            self.other_vendor.add(task.key)
            return None
        self.from_fallback.add(task.key)
        return found

    def _trusted(self, task: Task, target: Target, found: Best, default) -> bool:
        """Whether to build `found` rather than the task's default: the model's verdict where it
        gave one, else whether its isolated win is beyond noise (a static estimate, a record of
        another machine, or a default never timed here leave nothing to weigh: trusted)."""
        if default is None or found.config.to_json() == default.to_json():
            return True
        verdict = verdict_of(self.db, task, target, found.config)
        if verdict is not None:
            return verdict.wins
        if found.static_estimate or found.fingerprint != target.fingerprint:
            return True
        default_cost = config_cost(self.db, task, target, default, found.caches)
        return default_cost is None or found.cost <= (1 - IN_MODEL_NOISE) * default_cost
