"""`Database`: the tuning database on one file (or SQLAlchemy URL) — opening, writing, counting.

Every write is one short transaction (`BEGIN IMMEDIATE` on SQLite), so a kill -9 loses at most
the batch in flight and several tuners share one file. Queries that turn rows back into
records of tasks live in `queries.py`; JSON lines in `jsonl.py`.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from sqlalchemy import (
    Column,
    Connection,
    CursorResult,
    Engine,
    Table,
    and_,
    create_engine,
    delete,
    exists,
    func,
    insert,
    inspect,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import StaticPool

from autosched.database.identity import TargetInfo
from autosched.database.location import DatabaseError, check_file, default_location, is_url, make_engine
from autosched.database.migrations import migrate
from autosched.database.schema import (
    SCHEMA_VERSION,
    claims,
    metadata,
    records,
    schema_version,
    sessions,
    targets,
    workloads,
)
from autosched.database.stored import StoredRecord, WorkloadInfo, config_text
from autosched.measure import ErrorKind, MeasureResult, Record, RecordError
from autosched.target import Target


class Database:
    """A tuning database. `location` is a path or an SQLAlchemy URL; None means
    `default_location()` (`AUTOSCHED_DB`, else the per-user file).

    A file that does not exist yet (or is empty) is created by the first write, not by opening
    it: until then reads see an empty database, so a command that fails before writing leaves
    no file behind. `read_only` opens a file without ever writing it (SQLite's `mode=ro`): what
    the commands that only read use, so they work on a file they may not write, and never
    change a file they read from."""

    def __init__(self, location: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> None:
        self.location = str(location) if location is not None else default_location()
        self.read_only = read_only
        self._pending: Path | None = None  # the file the first write creates
        if not is_url(self.location):
            self.location = str(Path(self.location).expanduser())
            path = Path(self.location)
            if not path.is_dir() and (not path.exists() or path.stat().st_size == 0):
                self._pending = path
                self._engine = _empty_engine()
                return
            check_file(path, read_only)
        self._engine = make_engine(self.location, read_only)
        with self._guard():
            self._prepare()

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Database({self.location!r})"

    # --- opening ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Driver errors become one DatabaseError naming the file."""
        try:
            yield
        except DBAPIError as e:
            msg = str(e.orig) if e.orig is not None else str(e)
            if "malformed" in msg or "not a database" in msg or "disk image" in msg:
                msg = f"the tuning database is corrupt or truncated (sqlite: {msg})"
            elif "unable to open" in msg:
                msg = f"cannot open or create the tuning database here (sqlite: {msg})"
            elif "readonly" in msg or "read-only" in msg:
                msg = f"the tuning database is read-only (sqlite: {msg})"
            raise DatabaseError(f"{self.location}: {msg}") from None

    def _prepare(self) -> None:
        with self._engine.begin() as conn:
            if self.location.startswith("sqlite") or not is_url(self.location):
                conn.exec_driver_sql("PRAGMA quick_check").fetchall()
            tables = set(inspect(conn).get_table_names())
            if not tables and self.read_only:
                raise DatabaseError(f"{self.location}: an empty SQLite database, not a tuning database")
            if not tables:
                metadata.create_all(conn)
                conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
                return
            if "schema_version" not in tables:
                raise DatabaseError(f"{self.location}: an SQLite database, but not a tuning database "
                                    f"(tables: {', '.join(sorted(tables))})")
            version = conn.execute(select(schema_version.c.version)).scalar()
            if version is None or version > SCHEMA_VERSION:
                raise DatabaseError(f"{self.location}: schema version {version} is newer than this autosched's "
                                    f"{SCHEMA_VERSION}; upgrade autosched to use this database")
            if version < SCHEMA_VERSION and not self.read_only:
                migrate(conn, version)
        if version < SCHEMA_VERSION and self.read_only:
            if self._engine.dialect.name != "sqlite":
                raise DatabaseError(f"{self.location}: schema version {version} is older than this autosched's "
                                    f"{SCHEMA_VERSION}; a command that writes to it (tune, db import) upgrades it")
            self._engine = _migrated_copy(self._engine, version)

    def _create(self, pending: Path) -> None:
        """The first write to a database whose file (`pending`) did not exist: create it now."""
        check_file(pending)
        self._engine.dispose()
        self._engine = make_engine(self.location)
        self._pending = None
        self._prepare()

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read transaction (deferred: it never blocks writers)."""
        with self._guard(), self._engine.connect().execution_options(autosched_read=True) as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def writing(self) -> Iterator[Connection]:
        """One write transaction, `BEGIN IMMEDIATE` on SQLite."""
        if self.read_only:
            raise DatabaseError(f"{self.location}: opened read-only, cannot write to it")
        with self._guard():
            if self._pending is not None:
                self._create(self._pending)
            with self._engine.begin() as conn:
                yield conn

    # --- writing -----------------------------------------------------------------------------
    def commit(self, measured: Sequence[Record], session: int | None = None, tuner: str | None = None) -> int:
        """Store a measured batch in one transaction; returns how many rows were new."""
        return self.insert([StoredRecord.of(rec, tuner) for rec in measured], session)

    def insert(self, stored: Iterable[StoredRecord], session: int | None = None) -> int:
        """Store records in one transaction, creating their target and workload rows; a record
        already present (same workload, target, config and time) is not stored twice. The claims
        on their configs (`claims.py`) go in the same transaction: a config is never both
        unclaimed and unrecorded between its measurement and its record."""
        stored = list(stored)
        if not stored:
            return 0
        with self.writing() as conn:
            target_ids: dict[TargetInfo, int] = {}
            workload_ids: dict[tuple[str, str], int] = {}
            rows = []
            for s in stored:
                if s.target not in target_ids:
                    target_ids[s.target] = target_row_id(conn, s.target)
                if (s.key, s.space) not in workload_ids:
                    workload_ids[(s.key, s.space)] = workload_row_id(conn, s.workload)
                res = s.result
                rows.append({"workload_id": workload_ids[(s.key, s.space)], "target_id": target_ids[s.target],
                             "session_id": session, "config": config_text(s.config),
                             "costs": json.dumps(list(res.costs)), "cost": res.cost if res.ok else None,
                             "error_kind": res.error_kind.name, "error_msg": res.error_msg, "build_s": res.build_s,
                             "run_s": s.run_s, "tuner": s.tuner, "version": s.version, "timestamp": res.timestamp,
                             "node": s.node})
            before = conn.execute(select(func.count()).select_from(records)).scalar_one()
            insert_missing(conn, records, rows, RECORD_KEY)
            added = conn.execute(select(func.count()).select_from(records)).scalar_one() - before
            if conn.execute(select(exists().select_from(claims))).scalar():
                conn.execute(delete(claims).where(tuple_(*CLAIM_KEY).in_(
                    {(r["workload_id"], r["target_id"], r["config"]) for r in rows})))
            if session is not None:
                conn.execute(update(sessions).where(sessions.c.id == session)
                             .values(trials_done=sessions.c.trials_done + added))
        return added

    def merge(self, other: Database) -> int:
        """Copy every record of `other` that this database lacks; returns how many were new."""
        return self.insert(other.stored())

    def start_session(self, model: str, target: Target, trials: int, tasks: str | None = None) -> int:
        """A tuning run begins: its row records what was asked (`tasks`: the `tasks_digest` of the
        model's tasks); `end_session` what came of it."""
        with self.writing() as conn:
            target_id = target_row_id(conn, TargetInfo.of(target))
            return _inserted_id(conn.execute(insert(sessions).values(
                model=model, target_id=target_id, trials_asked=trials, trials_done=0, status="running",
                started=time.time(), tasks=tasks)))

    def end_session(self, session: int, status: str) -> int:
        """Close a session ("done", "interrupted", "failed"); returns the records it kept."""
        with self.writing() as conn:
            conn.execute(update(sessions).where(sessions.c.id == session).values(status=status, ended=time.time()))
            return conn.execute(select(sessions.c.trials_done).where(sessions.c.id == session)).scalar() or 0

    def add_search_time(self, session: int, seconds: float) -> None:
        with self.writing() as conn:
            conn.execute(update(sessions).where(sessions.c.id == session)
                         .values(search_s=sessions.c.search_s + seconds))

    def prune(self, before: float) -> int:
        """Drop records older than `before` (a Unix time) that failed or are not the best of their
        workload and target; returns how many went."""
        if self._pending is not None:  # no file: nothing to drop, and no reason to create one
            return 0
        r2 = records.alias("r2")
        best_cost = (select(func.min(r2.c.cost))
                     .where(and_(r2.c.workload_id == records.c.workload_id, r2.c.target_id == records.c.target_id))
                     .scalar_subquery())
        with self.writing() as conn:
            result = conn.execute(delete(records).where(and_(
                records.c.timestamp < before,
                (records.c.cost.is_(None)) | (records.c.cost > best_cost))))
            return result.rowcount

    # --- reading -----------------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        """Counts for `db stats`: records (and how many failed), workloads, targets, sessions."""
        with self.reading() as conn:
            def count(table, *where) -> int:
                return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()
            return {"location": self.location, "schema_version": SCHEMA_VERSION, "records": count(records),
                    "failed": count(records, records.c.cost.is_(None)), "workloads": count(workloads),
                    "targets": count(targets), "sessions": count(sessions)}

    def sessions(self) -> list[dict[str, object]]:
        """Every tuning session: model, target string, trials asked and done, status, start and end."""
        query = (select(sessions, targets.c.target).join(targets, sessions.c.target_id == targets.c.id, isouter=True)
                 .order_by(sessions.c.id))
        with self.reading() as conn:
            return [dict(row) for row in conn.execute(query).mappings()]

    def stored(self) -> Iterator[StoredRecord]:
        """Every record in full, oldest first (for export and merge)."""
        query = (select(records, workloads.c.key, workloads.c.op, workloads.c.shapes, workloads.c.flops,
                        targets.c.target, targets.c.fingerprint, targets.c.isa, targets.c.compiler)
                 .join(workloads, records.c.workload_id == workloads.c.id)
                 .join(targets, records.c.target_id == targets.c.id).order_by(records.c.id))
        with self.reading() as conn:
            rows = conn.execute(query).mappings().all()
        for row in rows:
            yield StoredRecord(key=row["key"], op=row["op"], shapes=row["shapes"], flops=row["flops"],
                               config=json.loads(row["config"]),
                               target=TargetInfo(row["target"], row["fingerprint"], row["isa"], row["compiler"]),
                               result=result_of(row), tuner=row["tuner"], version=row["version"], node=row["node"],
                               run_s=row["run_s"])


def _memory_engine() -> Engine:
    """One in-memory SQLite database, the same whichever thread reads it."""
    return create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})


def _empty_engine() -> Engine:
    """An empty tuning database in memory: what reads see before a new file's first write."""
    engine = _memory_engine()
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
    return engine


def _migrated_copy(engine: Engine, version: int) -> Engine:
    """A file of an older schema opened read-only, copied into memory and migrated there:
    reading a file must not upgrade (rewrite) it."""
    memory = _memory_engine()
    source, copy = engine.raw_connection(), memory.raw_connection()
    try:
        if source.driver_connection is None or copy.driver_connection is None:  # both are open sqlite3 connections
            raise DatabaseError("cannot copy the database: its sqlite3 connection is closed")
        source.driver_connection.backup(copy.driver_connection)
    finally:
        source.close()
        copy.close()
    engine.dispose()
    with memory.begin() as conn:
        migrate(conn, version)
    return memory


#: what makes a record, or a claim, the same as another
RECORD_KEY = (records.c.workload_id, records.c.target_id, records.c.config, records.c.timestamp)
CLAIM_KEY = (claims.c.workload_id, claims.c.target_id, claims.c.config)


def insert_missing(conn: Connection, table: Table, rows: list[dict], key: Sequence[Column]) -> None:
    """Insert the rows whose `key` (the table's unique constraint) is not there yet: the
    dialect's own "do nothing on conflict" where it has one, else rows already present are
    filtered out first (safe under the writing transaction of SQLite-like engines)."""
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        module = importlib.import_module(f"sqlalchemy.dialects.{dialect}")
        conn.execute(module.insert(table).on_conflict_do_nothing(), rows)
        return
    if dialect in ("mysql", "mariadb"):
        conn.execute(insert(table).prefix_with("IGNORE"), rows)
        return
    names = [c.name for c in key]
    present = set(tuple(row) for row in conn.execute(select(*key).where(
        tuple_(*key).in_({tuple(r[n] for n in names) for r in rows}))).all())
    fresh = {tuple(r[n] for n in names): r for r in rows}
    new = [r for k, r in fresh.items() if k not in present]
    if new:
        conn.execute(insert(table), new)


def result_of(row) -> MeasureResult:
    """The MeasureResult of a records row (validated like a log line)."""
    try:
        return MeasureResult(costs=tuple(json.loads(row["costs"])), error_kind=ErrorKind[row["error_kind"]],
                             error_msg=row["error_msg"], build_s=row["build_s"], timestamp=row["timestamp"])
    except (ValueError, KeyError, RecordError) as e:
        raise DatabaseError(f"record {row['id']}: malformed ({e})") from None


def target_row_id(conn: Connection, info: TargetInfo) -> int:
    """The targets row of `info`, created if it is new (inside the caller's write)."""
    found = conn.execute(select(targets.c.id).where(targets.c.target == info.target,
                                                    targets.c.fingerprint == info.fingerprint)).scalar()
    if found is not None:
        return found
    return _inserted_id(conn.execute(insert(targets).values(target=info.target, fingerprint=info.fingerprint,
                                                            isa=info.isa, compiler=info.compiler)))


def workload_row_id(conn: Connection, s: WorkloadInfo) -> int:
    """The workloads row of `s`, created if it is new (inside the caller's write)."""
    found = conn.execute(select(workloads.c.id).where(workloads.c.key == s.key, workloads.c.space == s.space)).scalar()
    if found is not None:
        if s.flops is not None:
            conn.execute(update(workloads).where(workloads.c.id == found, workloads.c.flops.is_(None))
                         .values(flops=s.flops))
        return found
    return _inserted_id(conn.execute(insert(workloads).values(key=s.key, op=s.op, shapes=s.shapes, flops=s.flops,
                                                              template=s.template, space=s.space)))


def _inserted_id(result: CursorResult) -> int:
    """The primary key of the row a one-row INSERT made (SQLAlchemy reports it for such a statement)."""
    key = result.inserted_primary_key
    if key is None:
        raise DatabaseError("the database reported no primary key for an inserted row")
    return key[0]
