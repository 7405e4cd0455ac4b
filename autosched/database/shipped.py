"""Shipped records: tuning records for the zoo models installed with the package (`tuning_logs/`),
so a first build is fast before any tuning. They are only a fallback: a build uses them for a task
only when the user's database has no valid record of it on a matching ISA, and like any record
from another machine they apply only within their ISA class."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from autosched.database.jsonl import import_jsonl
from autosched.database.store import Database


def shipped_dir() -> Path | None:
    """`tuning_logs/` of a source checkout (editable installs), else the installed data directory."""
    for candidate in (Path(__file__).resolve().parents[2] / "tuning_logs",
                      Path(sys.prefix) / "share" / "autosched" / "tuning_logs"):
        if candidate.is_dir():
            return candidate
    return None


def shipped_database(directory: str | os.PathLike[str] | None = None) -> Database | None:
    """The shipped records (of `directory`, default `shipped_dir()`) in an in-memory database;
    None when there are none."""
    directory = Path(directory) if directory is not None else shipped_dir()
    files = sorted(directory.glob("*.jsonl")) if directory is not None and directory.is_dir() else []
    if not files:
        return None
    db = Database("sqlite://")
    for path in files:
        import_jsonl(db, path)
    db.location = f"shipped records ({directory})"
    return db
