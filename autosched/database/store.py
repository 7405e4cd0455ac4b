"""`Database`: the tuning database on one file (or SQLAlchemy URL) — opening, writing, counting.

Every write is one short transaction (`BEGIN IMMEDIATE` on SQLite), so a kill -9 loses at most
the batch in flight and several tuners share one file. On PostgreSQL, where writers' transactions
do not exclude each other, rows that concurrent writers may both insert are inserted with
ON CONFLICT DO NOTHING on their unique key, and tables are created and migrated under an
advisory lock. Queries that turn rows back into
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
    Table,
    and_,
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

from autosched.database.identity import TargetInfo
from autosched.database.location import DatabaseError, check_file, default_location, is_url, make_engine, shown
from autosched.database.memory import empty_engine, migrated_copy
from autosched.database.migrations import migrate
from autosched.database.schema import (
    SCHEMA_VERSION,
    claims,
    metadata,
    records,
    schema_version,
    sessions,
    targets,
    verdicts,
    workloads,
)
from autosched.database.stored import StoredRecord, WorkloadInfo, config_text
from autosched.measure import ErrorKind, MeasureResult, Record, RecordError
from autosched.target import Target

#: the PostgreSQL advisory lock held while a database's tables are created or migrated
_SCHEMA_LOCK = 0x6175746F  # "auto"


class Database:
    """A tuning database. `location` is a path or an SQLAlchemy URL; None means
    `default_location()` (`AUTOSCHED_DB`, else the per-user file).

    A file that does not exist yet (or is empty) is created by the first write, not by opening
    it: until then reads see an empty database, so a command that fails before writing leaves
    no file behind. `read_only` opens a file without ever writing it (SQLite's `mode=ro`): what
    the commands that only read use, so they work on a file they may not write, and never
    change a file they read from."""

    def __init__(self, location: str | os.PathLike[str] | None = None, *, read_only: bool = False) -> None:
        self._url = str(location) if location is not None else default_location()
        self.read_only = read_only
        self._pending = False  # no tables yet (a file not there, or an empty server database): the first write makes them
        if not is_url(self._url):
            self._url = str(Path(self._url).expanduser())
            path = Path(self._url)
            if not path.is_dir() and (not path.exists() or path.stat().st_size == 0):
                self.location = self._url
                self._pending = True
                self._engine = empty_engine()
                return
            check_file(path, read_only)
        self.location = shown(self._url)  # what messages say: a URL's password hidden
        self._engine = make_engine(self._url, read_only)
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
        """Driver errors become one DatabaseError naming the database, on one line."""
        try:
            yield
        except DBAPIError as e:
            msg = " ".join(str(e.orig if e.orig is not None else e).split())
            driver = self._engine.dialect.name
            if "malformed" in msg or "not a database" in msg or "disk image" in msg:
                msg = f"the tuning database is corrupt or truncated ({driver}: {msg})"
            elif "unable to open" in msg:
                msg = f"cannot open or create the tuning database here ({driver}: {msg})"
            elif "readonly" in msg or "read-only" in msg:
                msg = f"the tuning database is read-only ({driver}: {msg})"
            raise DatabaseError(f"{self.location}: {msg}") from None

    def _prepare(self, create: bool = False) -> None:
        """Check what the database holds; `create` its tables if it has none (else reads see an
        empty database until the first write), migrate an older schema unless opened read-only."""
        dialect, version = self._engine.dialect.name, SCHEMA_VERSION
        with self._engine.begin() as conn:
            if dialect == "sqlite":
                conn.exec_driver_sql("PRAGMA quick_check").fetchall()
            elif dialect == "postgresql" and not self.read_only:  # one creator or migrator at a time
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})")
            tables = set(inspect(conn).get_table_names())
            if not tables and not create:
                self._pending = True
            elif not tables:
                metadata.create_all(conn)
                conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
                return
            else:
                if "schema_version" not in tables:
                    raise DatabaseError(f"{self.location}: a database, but not a tuning database "
                                        f"(tables: {', '.join(sorted(tables))})")
                found = conn.execute(select(schema_version.c.version)).scalar()
                if found is None or found > SCHEMA_VERSION:
                    raise DatabaseError(f"{self.location}: schema version {found} is newer than this autosched's "
                                        f"{SCHEMA_VERSION}; upgrade autosched to use this database")
                version = found
                if version < SCHEMA_VERSION and not self.read_only:
                    migrate(conn, version)
        if self._pending:
            self._engine.dispose()
            self._engine = empty_engine()
        elif version < SCHEMA_VERSION and self.read_only:
            self._engine = migrated_copy(self._engine, version)

    def _create(self) -> None:
        """The first write to a database that had no tables (or no file): create them now."""
        if not is_url(self._url):
            check_file(Path(self._url))
        self._engine.dispose()
        self._engine = make_engine(self._url)
        self._pending = False
        self._prepare(create=True)

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
            if self._pending:
                self._create()
            with self._engine.begin() as conn:
                yield conn

    # --- writing -----------------------------------------------------------------------------
    def commit(self, measured: Sequence[Record], session: int | None = None, tuner: str | None = None,
               trials: bool = True) -> int:
        """Store a measured batch in one transaction; returns how many rows were new. `trials`:
        whether they count as the session's trials (a default re-timed beside a round does not)."""
        return self.insert([StoredRecord.of(rec, tuner) for rec in measured], session, trials)

    def insert(self, stored: Iterable[StoredRecord], session: int | None = None, trials: bool = True) -> int:
        """Store records in one transaction, creating their target and workload rows; a record
        already present (same workload, target, config and time) is not stored twice. The claims
        on their configs (`claims.py`) go in the same transaction: a config is never both
        unclaimed and unrecorded between its measurement and its record. New rows count toward
        `session`'s trials unless `trials` is False."""
        stored = list(stored)
        if not stored:
            return 0
        with self.writing() as conn:
            # new targets and workloads in one order, whoever writes: two transactions inserting the
            # same ones then wait for each other instead of deadlocking (records keep the order they
            # come in, which is their order in the database)
            target_ids = {info: target_row_id(conn, info)
                          for info in sorted({s.target for s in stored}, key=lambda t: (t.target, t.fingerprint))}
            workload_ids = {}
            for s in sorted({(s.key, s.space): s for s in stored}.values(), key=lambda s: (s.key, s.space)):
                workload_ids[(s.key, s.space)] = workload_row_id(conn, s.workload)
            rows = []
            for s in stored:
                res = s.result
                rows.append({"workload_id": workload_ids[(s.key, s.space)], "target_id": target_ids[s.target],
                             "session_id": session, "config": config_text(s.config),
                             "costs": json.dumps(list(res.costs)), "cost": res.cost if res.ok else None,
                             "error_kind": res.error_kind.name, "error_msg": res.error_msg, "build_s": res.build_s,
                             "run_s": s.run_s, "tuner": s.tuner, "version": s.version, "timestamp": res.timestamp,
                             "node": s.node, "caches": res.caches, "threads": res.threads})
            added = insert_missing(conn, records, rows, RECORD_KEY)
            if conn.execute(select(exists().select_from(claims))).scalar():
                conn.execute(delete(claims).where(tuple_(*CLAIM_KEY).in_(
                    {(r["workload_id"], r["target_id"], r["config"]) for r in rows})))
            if session is not None and trials:
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
        if self._pending:  # no tables: nothing to drop, and no reason to create one
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
        """Counts for `db stats`: records (and how many failed), workloads, targets, sessions, the
        configs tuners hold claims on now, and the model's verdicts on tuned configs."""
        with self.reading() as conn:
            def count(table, *where) -> int:
                return conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()
            return {"location": self.location, "schema_version": SCHEMA_VERSION, "records": count(records),
                    "failed": count(records, records.c.cost.is_(None)), "workloads": count(workloads),
                    "targets": count(targets), "sessions": count(sessions), "claims": count(claims),
                    "verdicts": count(verdicts)}

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


#: what makes a record, or a claim, the same as another
RECORD_KEY = (records.c.workload_id, records.c.target_id, records.c.config, records.c.timestamp)
CLAIM_KEY = (claims.c.workload_id, claims.c.target_id, claims.c.config)


def insert_missing(conn: Connection, table: Table, rows: list[dict], key: Sequence[Column]) -> int:
    """Insert the rows whose `key` (the table's unique constraint) is not there yet and return
    how many were: the dialect's own "do nothing on conflict" where it has one, else rows
    already present are filtered out first (safe under the writing transaction of SQLite-like
    engines). Counted from what the insert reports, not by counting the table before and
    after: on a server other writers commit in between."""
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        stmt = _dialect_insert(conn, table).on_conflict_do_nothing().returning(table.c.id)
        return len(conn.execute(stmt, rows).all())
    if dialect in ("mysql", "mariadb"):
        return conn.execute(insert(table).prefix_with("IGNORE"), rows).rowcount
    names = [c.name for c in key]
    present = set(tuple(row) for row in conn.execute(select(*key).where(
        tuple_(*key).in_({tuple(r[n] for n in names) for r in rows}))).all())
    fresh = {tuple(r[n] for n in names): r for r in rows}
    new = [r for k, r in fresh.items() if k not in present]
    if new:
        conn.execute(insert(table), new)
    return len(new)


def _dialect_insert(conn: Connection, table: Table):
    """The INSERT of SQLite or PostgreSQL, which has `on_conflict_do_nothing`."""
    return importlib.import_module(f"sqlalchemy.dialects.{conn.dialect.name}").insert(table)


def _id_of(conn: Connection, table: Table, unique: dict[str, object], values: dict[str, object]) -> int:
    """The id of the row of `table` whose unique columns hold `unique`, inserted with `values`
    if there is none. On PostgreSQL another writer may insert it between our look and our
    insert (its transactions do not exclude each other as SQLite's immediate ones do): the
    insert then does nothing, and the row it committed is read."""
    where = [table.c[name] == value for name, value in unique.items()]
    found = conn.execute(select(table.c.id).where(*where)).scalar()
    if found is not None:
        return found
    if conn.dialect.name != "postgresql":
        return _inserted_id(conn.execute(insert(table).values(**unique, **values)))
    stmt = _dialect_insert(conn, table).values(**unique, **values).on_conflict_do_nothing().returning(table.c.id)
    found = conn.execute(stmt).scalar()
    if found is None:
        found = conn.execute(select(table.c.id).where(*where)).scalar_one()
    return found


def result_of(row) -> MeasureResult:
    """The MeasureResult of a records row (validated like a log line)."""
    try:
        return MeasureResult(costs=tuple(json.loads(row["costs"])), error_kind=ErrorKind[row["error_kind"]],
                             error_msg=row["error_msg"], build_s=row["build_s"], timestamp=row["timestamp"],
                             caches=row.get("caches"), threads=row.get("threads"))
    except (ValueError, KeyError, RecordError) as e:
        raise DatabaseError(f"record {row['id']}: malformed ({e})") from None


def target_row_id(conn: Connection, info: TargetInfo) -> int:
    """The targets row of `info`, created if it is new (inside the caller's write)."""
    return _id_of(conn, targets, {"target": info.target, "fingerprint": info.fingerprint},
                  {"isa": info.isa, "compiler": info.compiler})


def workload_row_id(conn: Connection, s: WorkloadInfo) -> int:
    """The workloads row of `s`, created if it is new (inside the caller's write)."""
    found = _id_of(conn, workloads, {"key": s.key, "space": s.space},
                   {"op": s.op, "shapes": s.shapes, "flops": s.flops, "template": s.template})
    if s.flops is not None:
        conn.execute(update(workloads).where(workloads.c.id == found, workloads.c.flops.is_(None)).values(flops=s.flops))
    return found


def _inserted_id(result: CursorResult) -> int:
    """The primary key of the row a one-row INSERT made (SQLAlchemy reports it for such a statement)."""
    key = result.inserted_primary_key
    if key is None:
        raise DatabaseError("the database reported no primary key for an inserted row")
    return key[0]
