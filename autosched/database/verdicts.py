"""Verdicts: whether a task's tuned config made the whole model faster, as timed in the model.

A record's time is the kernel alone, run over and over with its data warm. In the model the
same kernel runs after others that evicted its weights and with the executor's threads around
it, and a config that wins alone can lose there. A build trusts a tuned config over the
task's default only where the model said it wins, or, not yet judged, where its isolated win
is larger than in-model noise (`IN_MODEL_NOISE`); a config the model judged a loss is never
built, and the task then builds the fastest of its configs the model judged wins, if any. Verdicts are machine-specific (keyed by the target's fingerprint) and keyed by what a
build looks up (task, config), so they judge shipped records' configs too.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import and_, delete, insert, select

from autosched.database.identity import task_digest
from autosched.database.schema import verdicts
from autosched.database.store import Database
from autosched.database.stored import config_text
from autosched.space import Config
from autosched.target import Target
from autosched.task import Task

#: relative gap by which an isolated timing must beat the task's default to be built untested:
#: within it, isolated wins were as often losses in the model (ResNet-18's tuned build slower
#: than its untuned one while the records summed to less, issue 18)
IN_MODEL_NOISE = 0.05


@dataclass(frozen=True)
class Verdict:
    wins: bool
    with_ms: float     # the model's median latency with the config (a kernel verdict: the task's kernel, per call)
    without_ms: float  # with this task on its default schedule instead
    session: int | None


def _where(task: Task, target: Target, config: Config):
    return and_(verdicts.c.task == task_digest(task.key), verdicts.c.fingerprint == target.fingerprint,
                verdicts.c.config == config_text(config.to_json()))


def verdict_of(db: Database, task: Task, target: Target, config: Config) -> Verdict | None:
    """What the model said of `config` for `task` on this machine, if it was ever judged."""
    query = select(verdicts).where(_where(task, target, config))
    with db.reading() as conn:
        row = conn.execute(query).mappings().first()
    return None if row is None else Verdict(bool(row["wins"]), row["with_ms"], row["without_ms"], row["session_id"])


def winners(db: Database, task: Task, target: Target) -> frozenset[str]:
    """The configs (as the records key them) the model judged wins for `task` on this machine."""
    return _judged(db, task, target, True)


def losers(db: Database, task: Task, target: Target) -> frozenset[str]:
    """The configs (as the records key them) the model judged losses for `task` on this machine."""
    return _judged(db, task, target, False)


def _judged(db: Database, task: Task, target: Target, wins: bool) -> frozenset[str]:
    query = select(verdicts.c.config).where(verdicts.c.task == task_digest(task.key),
                                            verdicts.c.fingerprint == target.fingerprint,
                                            verdicts.c.wins != 0 if wins else verdicts.c.wins == 0)
    with db.reading() as conn:
        return frozenset(conn.execute(query).scalars())


def record_verdict(db: Database, task: Task, target: Target, config: Config, verdict: Verdict) -> None:
    """Store (or replace: the latest timing is the one to believe) the model's verdict on a config."""
    with db.writing() as conn:
        conn.execute(delete(verdicts).where(_where(task, target, config)))
        conn.execute(insert(verdicts).values(
            task=task_digest(task.key), fingerprint=target.fingerprint, config=config_text(config.to_json()),
            wins=int(verdict.wins), with_ms=verdict.with_ms, without_ms=verdict.without_ms,
            session_id=verdict.session, timestamp=time.time()))
