"""Schema migrations: an older file is brought to `SCHEMA_VERSION` in one transaction, a newer
one is refused, never misread."""
from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from autosched.database.schema import SCHEMA_VERSION, claims, kernel_times, model_times, verdicts


def _add_node(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE records ADD COLUMN node TEXT")


def _add_search_time(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN search_s FLOAT NOT NULL DEFAULT 0")


def _add_session_tasks(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE sessions ADD COLUMN tasks VARCHAR(64)")


def _add_claims(conn: Connection) -> None:
    claims.create(conn)


def _add_model_timings(conn: Connection) -> None:
    for table in (verdicts, kernel_times, model_times):
        table.create(conn)


def _add_timing_context(conn: Connection) -> None:
    conn.exec_driver_sql("ALTER TABLE records ADD COLUMN caches VARCHAR(16)")
    conn.exec_driver_sql("ALTER TABLE records ADD COLUMN threads INTEGER")


#: version v → the step that turns a version-v file into version v + 1
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    1: _add_node, 2: _add_search_time, 3: _add_session_tasks, 4: _add_claims, 5: _add_model_timings,
    6: _add_timing_context}

assert set(MIGRATIONS) == set(range(1, SCHEMA_VERSION)), "every older version needs its step"


def migrate(conn: Connection, version: int) -> None:
    """Run every step from `version` to the current one inside the caller's transaction."""
    for v in range(version, SCHEMA_VERSION):
        MIGRATIONS[v](conn)
    conn.exec_driver_sql(f"UPDATE schema_version SET version = {SCHEMA_VERSION}")
