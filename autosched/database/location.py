"""Where the tuning database lives, and turning a file into an engine that is safe to share.

The default is one file per user, `$XDG_DATA_HOME/autosched/tuning.db` (`~/.local/share/...`);
`AUTOSCHED_DB` or an explicit path or SQLAlchemy URL replace it. An SQLite file is opened in
WAL mode with a busy timeout, and every transaction that writes starts with `BEGIN IMMEDIATE`:
a deferred transaction that reads and then writes fails with "database is locked" under
contention whatever the timeout, so several tuners could not share one file.

A PostgreSQL URL (`postgresql://user@host/db`) is a team's shared database: it needs the
`[postgres]` extra (psycopg 3, whichever driver SQLAlchemy would pick by default), and a
read-only open makes every transaction READ ONLY on the server.
"""
from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import QueuePool

from autosched.errors import AutoschedError

BUSY_TIMEOUT_MS = 60_000
#: seconds between tries of a WAL switch another process holds the file for
WAL_RETRY_S = 0.01
_LIKE = "like postgresql://user@host/db or sqlite:///file.db"
_SQLITE_MAGIC = b"SQLite format 3\x00"


class DatabaseError(AutoschedError):
    """A tuning database that cannot be used: not a database, corrupt, read-only, too new."""


def default_location() -> str:
    """`AUTOSCHED_DB` if set, else the per-user file under `$XDG_DATA_HOME` (or ~/.local/share)."""
    env = os.environ.get("AUTOSCHED_DB")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "autosched", "tuning.db")


def is_url(location: str) -> bool:
    return "://" in location


def shown(location: str) -> str:
    """A location as messages show it: a URL's password hidden."""
    if not is_url(location):
        return location
    try:
        url = make_url(location)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy reads: hide what sits where a password would
        return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", location)
    return location if url.password is None else url.render_as_string(hide_password=True)


def parse_url(location: str) -> URL:
    """The SQLAlchemy URL of `location`; a plain `postgresql://` means psycopg 3 (SQLAlchemy 2.0
    would otherwise pick psycopg2, which the `[postgres]` extra does not install)."""
    try:
        url = make_url(location)
    except (ArgumentError, ValueError):
        raise DatabaseError(f"{shown(location)}: not a database URL ({_LIKE})") from None
    return url.set(drivername="postgresql+psycopg") if url.drivername in ("postgresql", "postgres") else url


def _url_engine(location: str, read_only: bool) -> Engine:
    url = parse_url(location)
    try:
        engine = create_engine(url)
    except (ArgumentError, ValueError) as e:  # an unknown dialect (NoSuchModuleError), a port that is not a number
        raise DatabaseError(f"{shown(location)}: not a database URL autosched can open ({e}; {_LIKE})") from None
    except ImportError as e:
        driver, hint = e.name or url.get_driver_name(), ""
        if url.get_backend_name() == "postgresql":
            hint = (': pip install "autosched[postgres]"' if driver == "psycopg" else
                    '; postgresql:// URLs use psycopg 3: pip install "autosched[postgres]"')
        raise DatabaseError(f"{shown(location)}: the database driver {driver!r} is not installed{hint}") from None
    if read_only and engine.dialect.name == "postgresql":
        @event.listens_for(engine, "connect")
        def _read_only(dbapi_conn, _record) -> None:
            with dbapi_conn.cursor() as cur:
                cur.execute("SET default_transaction_read_only = on")
            dbapi_conn.commit()
    return engine


def check_file(path: Path, read_only: bool = False) -> None:
    """Refuse, naming the file, what SQLite would misreport later: a directory, a file that is
    not an SQLite database, a path that cannot be written (unless it is only to be read)."""
    if path.is_dir():
        raise DatabaseError(f"{path}: is a directory, not a tuning database")
    if path.exists():
        try:
            with open(path, "rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as e:
            raise DatabaseError(f"{path}: cannot read the tuning database: {e.strerror}") from None
        if head and head != _SQLITE_MAGIC:
            raise DatabaseError(f"{path}: not an SQLite database (not a tuning database, or overwritten)")
        if not read_only and not writable(path):
            raise DatabaseError(f"{path}: the tuning database is read-only (SQLite needs to write the file "
                                "and its directory); copy it somewhere writable or choose another with --db")
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatabaseError(f"{path}: cannot create the tuning database's directory: {e.strerror}") from None
    if not os.access(path.parent, os.W_OK):
        raise DatabaseError(f"{path}: cannot create the tuning database: {path.parent} is read-only")


def writable(path: Path) -> bool:
    """Whether SQLite can write `path` and create its journal files beside it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def _wal(cur: sqlite3.Cursor) -> None:
    """Switch the file to WAL mode (once: a file already in it is left alone). The switch takes
    the file to itself, and SQLite answers a second process switching a new file at the same
    moment with "database is locked" at once, without waiting out the busy timeout: two tuners
    whose first commits created one database together failed that way (about 1 start in 9 on
    two processes, `tests/test_database.py`). So it is retried until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(WAL_RETRY_S)


def make_engine(location: str, read_only: bool = False) -> Engine:
    """An engine for a path or URL; SQLite files get WAL, a busy timeout and immediate writes.
    `read_only` files are opened with SQLite's `mode=ro`, which never writes them, and with
    `immutable=1` where they cannot be written at all: a WAL file's readers need its `-shm` beside
    it, which a read-only directory does not let them create. A PostgreSQL database opened
    `read_only` runs every transaction READ ONLY."""
    if is_url(location):
        engine = _url_engine(location, read_only)
        if engine.dialect.name != "sqlite":
            return engine
    elif read_only:
        path = Path(location).resolve()
        uri = f"{path.as_uri()}?mode=ro" + ("" if writable(path) else "&immutable=1")
        engine = create_engine("sqlite://", poolclass=QueuePool,
                               creator=lambda: sqlite3.connect(uri, uri=True, check_same_thread=False))
    else:
        engine = create_engine(f"sqlite:///{location}")

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:
        dbapi_conn.isolation_level = None  # no implicit BEGIN from the driver: ours below
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if not read_only:
            _wal(cur)
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        reads = read_only or conn.get_execution_options().get("autosched_read", False)
        conn.exec_driver_sql("BEGIN" if reads else "BEGIN IMMEDIATE")

    @event.listens_for(engine, "handle_error")
    def _interrupted(context) -> None:
        # A KeyboardInterrupt (Ctrl-C, or SIGTERM, which the tuner turns into one) between a
        # statement and its rows makes SQLAlchemy close the connection, but SQLite keeps a
        # connection with a pending statement open (a "zombie") until that statement's cursor is
        # freed, and the traceback's reference cycle keeps the cursor until the next garbage
        # collection. A zombie inside a write transaction holds the write lock: the tuner's last
        # writes (its claims given back, its session closed) each waited out the busy timeout and
        # failed, a Ctrl-C'd tune hanging 120 s in a test. Closing the cursor ends the statement.
        if not isinstance(context.original_exception, Exception) and context.execution_context is not None:
            cursor = context.execution_context.cursor
            if cursor is not None:
                with contextlib.suppress(sqlite3.Error):
                    cursor.close()

    return engine
