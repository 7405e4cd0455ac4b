"""Claims: a config is taken in the database before it is built, so that concurrent tuners of
one workload and target (processes on one machine, or a fleet's drivers) measure it once.

A claim is a `claims` row keyed like the record it will become (workload, target, config) and
held by one tuning session, with its host, pid and an expiry. `ClaimBook.claim` takes a batch
in one write transaction (`BEGIN IMMEDIATE` on SQLite): each config is inserted unless present
(the unique key arbitrates between writers), a claim of a dead tuner is taken over, and a config
that already has a record is given back. The record's commit deletes the claim in its own
transaction (`Database.insert`), and a session that ends or fails gives back what it holds.

A tuner that dies without giving back (kill -9, a lost machine) leaves claims that others may
take: at once where the owner ran on this host and its pid is gone, else once the lease has
run out. A live tuner renews its leases from a heartbeat thread, so a batch that measures for
longer than a lease keeps its claims. Expiries are Unix times of the claiming machine: the
lease must stay far above the clock skew between a fleet's drivers (seconds with NTP), and
machines sharing a database must have distinct host names (a pid is only known dead on its host).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, delete, select, tuple_, update

from autosched.database.identity import TargetInfo
from autosched.database.schema import claims, records, targets, workloads
from autosched.database.store import CLAIM_KEY, Database, insert_missing, target_row_id, workload_row_id
from autosched.database.stored import WorkloadInfo, config_text
from autosched.measure import MeasureInput
from autosched.space import ConfigSpace
from autosched.target import Target

#: seconds a claim outlives its tuner's last sign of life where death cannot be seen directly
LEASE_S = 60.0

Key = tuple[int, int, str]  # (workload row, target row, config text)


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: a tuning session, the machine and the process it runs in."""

    session: int
    host: str
    pid: int

    @classmethod
    def this_process(cls, session: int) -> Owner:
        return cls(session, socket.gethostname(), os.getpid())

    def sees_dead(self, host: str, pid: int) -> bool:
        """Whether a claim's process is known dead from here: on this host, and its pid gone."""
        if host != self.host or pid == self.pid:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False


@dataclass
class ClaimStats:
    """What a session's claims came to: configs granted; refused because another live tuner
    held them (`contended`) or because they had a record already (`measured`); claims of dead
    tuners taken over (`reclaimed`); and seconds spent in the database claiming and renewing."""

    granted: int = 0
    contended: int = 0
    measured: int = 0
    reclaimed: int = 0
    seconds: float = 0.0


@dataclass
class ClaimBook:
    """One tuning session's claims in `db`. `start()` begins renewing its leases every third
    of `lease_s` in a daemon thread; `close()` stops that and gives back every claim it holds."""

    db: Database
    owner: Owner
    lease_s: float = LEASE_S
    stats: ClaimStats = field(default_factory=ClaimStats)
    _ids: dict[object, int] = field(default_factory=dict)  # WorkloadInfo / TargetInfo -> row id
    _targets: dict[Target, TargetInfo] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _heartbeat: threading.Thread | None = None

    # --- taking and giving back ----------------------------------------------------------------
    def claim(self, inputs: Sequence[MeasureInput]) -> list[bool]:
        """Claim each input's config; True where this session now holds it and should measure it,
        False where another live tuner holds it or a record of it exists."""
        if not inputs:
            return []
        start = time.perf_counter()
        with self.db.writing() as conn:
            granted = self._claim(conn, [self._key(conn, inp) for inp in inputs])
        self.stats.seconds += time.perf_counter() - start
        return granted

    def _key(self, conn: Connection, inp: MeasureInput) -> Key:
        info = self._targets.get(inp.target)
        if info is None:
            info = self._targets[inp.target] = TargetInfo.of(inp.target)
        workload = WorkloadInfo.of(inp)
        if workload not in self._ids:
            self._ids[workload] = workload_row_id(conn, workload)
        if info not in self._ids:
            self._ids[info] = target_row_id(conn, info)
        return self._ids[workload], self._ids[info], config_text(inp.config.to_json())

    def _claim(self, conn: Connection, keys: list[Key]) -> list[bool]:
        now, me = time.time(), self.owner
        expires = now + self.lease_s
        # in key order, whoever claims: two PostgreSQL transactions inserting the same keys then wait
        # for each other instead of deadlocking
        insert_missing(conn, claims, [{"workload_id": w, "target_id": t, "config": c, "session_id": me.session,
                                       "host": me.host, "pid": me.pid, "expires": expires} for w, t, c in sorted(set(keys))],
                       CLAIM_KEY)
        held = {(r.workload_id, r.target_id, r.config): r
                for r in conn.execute(select(claims).where(tuple_(*CLAIM_KEY).in_(set(keys))))}
        mine: set[Key] = set()
        for key in dict.fromkeys(keys):
            row = held.get(key)
            if row is None:  # its record was committed (and the claim deleted) since our insert
                self.stats.measured += 1
            elif row.session_id == me.session:
                mine.add(key)
            elif (row.expires < now or me.sees_dead(row.host, row.pid)) and self._take_over(conn, row, expires):
                mine.add(key)
                self.stats.reclaimed += 1
            else:
                self.stats.contended += 1
        # checked after the claim is held: a record committed by then is seen, one committed later cannot exist
        record_key = (records.c.workload_id, records.c.target_id, records.c.config)
        recorded = {tuple(r) for r in conn.execute(select(*record_key).distinct()
                                                   .where(tuple_(*record_key).in_(mine)))} if mine else set()
        if recorded:
            conn.execute(delete(claims).where(claims.c.session_id == me.session, tuple_(*CLAIM_KEY).in_(recorded)))
            self.stats.measured += len(recorded)
        conn.execute(update(claims).where(claims.c.session_id == me.session).values(expires=expires))
        granted = mine - recorded
        self.stats.granted += len(granted)
        return [key in granted for key in keys]

    def _take_over(self, conn: Connection, row, expires: float) -> bool:
        """Take a dead tuner's claim, unless another tuner took it first (compare and swap)."""
        me = self.owner
        taken = conn.execute(update(claims).where(claims.c.id == row.id, claims.c.session_id == row.session_id,
                                                  claims.c.expires == row.expires)
                             .values(session_id=me.session, host=me.host, pid=me.pid, expires=expires))
        return taken.rowcount == 1

    def renew(self) -> None:
        """Push the expiry of every claim this session holds one lease ahead."""
        start = time.perf_counter()
        with self.db.writing() as conn:
            conn.execute(update(claims).where(claims.c.session_id == self.owner.session)
                         .values(expires=time.time() + self.lease_s))
        self.stats.seconds += time.perf_counter() - start

    def release(self) -> int:
        """Give back every claim this session holds (its measurements failed or stopped)."""
        with self.db.writing() as conn:
            return conn.execute(delete(claims).where(claims.c.session_id == self.owner.session)).rowcount

    # --- configs left by dead tuners -----------------------------------------------------------
    def abandoned(self, task_key: str, space: ConfigSpace, target: Target) -> list[int]:
        """Indices of `space`'s configs whose claims belong to dead tuners (or expired) and that have
        no record: what a tuner resuming after a kill -9 measures first (claiming takes them over)."""
        info = self._targets.get(target) or TargetInfo.of(target)
        query = (select(claims.c.config, claims.c.host, claims.c.pid, claims.c.expires)
                 .join(workloads, claims.c.workload_id == workloads.c.id)
                 .join(targets, claims.c.target_id == targets.c.id)
                 .where(workloads.c.key == task_key, workloads.c.space == space.fingerprint,
                        targets.c.target == info.target, targets.c.fingerprint == info.fingerprint,
                        claims.c.session_id != self.owner.session))
        now = time.time()
        with self.db.reading() as conn:
            rows = conn.execute(query).all()
        out = []
        for config, host, pid, expires in rows:
            if expires < now or self.owner.sees_dead(host, pid):
                out.append(space.from_json(json.loads(config)).index)
        return out

    # --- the heartbeat ------------------------------------------------------------------------
    def start(self) -> ClaimBook:
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._beat, name="autosched-claims", daemon=True)
            self._heartbeat.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.renew()
            except Exception:  # noqa: BLE001 - a database briefly unreachable: the next beat tries again
                continue

    def close(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        self.release()


__all__ = ["ClaimBook", "ClaimStats", "LEASE_S", "Owner"]
