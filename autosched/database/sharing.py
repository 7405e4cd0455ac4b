"""What one tuning session shares with the others on its database: the configs it claims
(`claims.py`), the records the others commit (its tuners learn from them as they arrive), and
the configs dead tuners left claimed. It is the tuners' `Peers` (`autosched.tuner.base`), so
tuners meet each other only through it and never see the database.

Others' records are read by id: on PostgreSQL a record whose transaction took its id before
another's and committed after it can be missed by a reader that saw the later one. That costs
a tuner one lesson, never a duplicate (its claim is refused all the same)."""
from __future__ import annotations

import time
from collections.abc import Sequence

from autosched.database.claims import LEASE_S, ClaimBook, ClaimStats, Owner
from autosched.database.queries import recorded_since
from autosched.database.store import Database
from autosched.measure import MeasureInput, Record, TaskLike
from autosched.space import ConfigSpace
from autosched.target import Target


class SharedTuning:
    """Session `session`'s share of `db`. Records committed after record id `since` (take it
    before reading the history a run resumes from) reach its tuners through `arrived`. A context
    manager: inside it, its claims' leases are renewed; leaving it gives back what it holds."""

    def __init__(self, db: Database, session: int, since: int, lease_s: float = LEASE_S) -> None:
        self.db, self.session = db, session
        self.claims = ClaimBook(db, Owner.this_process(session), lease_s)
        self._since = since
        self._seen: dict[tuple[str, str], int] = {}  # (task key, space) -> newest record id read

    @property
    def stats(self) -> ClaimStats:
        return self.claims.stats

    def claim(self, inputs: Sequence[MeasureInput]) -> list[bool]:
        return self.claims.claim(inputs)

    def arrived(self, task: TaskLike, space: ConfigSpace, target: Target) -> list[Record]:
        start = time.perf_counter()
        key = (task.key, space.fingerprint)
        found, self._seen[key] = recorded_since(self.db, task, space, target, self._seen.get(key, self._since),
                                                self.session)
        self.claims.stats.seconds += time.perf_counter() - start
        return found

    def abandoned(self, task: TaskLike, space: ConfigSpace, target: Target) -> list[int]:
        return self.claims.abandoned(task.key, space, target)

    def __enter__(self) -> SharedTuning:
        self.claims.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.claims.close()
