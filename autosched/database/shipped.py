"""Shipped records: tuning records for the zoo models installed with the package (`tuning_logs/`),
so a first build is fast before any tuning. They are only a fallback: a build uses them for a task
only when the user's database has no valid record of it on a matching ISA, and like any record
from another machine they apply only within their ISA class.

Beside them, `tuning_logs/training/` holds training logs: samples of whole tuning runs, spread
over each task's ranking (`db export --sample`), which the best records alone cannot give. A
tune's cost models start trained on them (records of the same templates and ISA class), so a
model's first rounds are guided even from an empty database."""
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
    return _load(Path(directory) if directory is not None else shipped_dir(), ("*.jsonl",), "shipped records")


def training_database(directory: str | os.PathLike[str] | None = None) -> Database | None:
    """The shipped training logs (`training/*.jsonl[.gz]` of `directory`, default `shipped_dir()`)
    in an in-memory database; None when there are none."""
    base = Path(directory) if directory is not None else shipped_dir()
    return _load(base / "training" if base is not None else None, ("*.jsonl", "*.jsonl.gz"), "shipped training logs")


def _load(directory: Path | None, patterns: tuple[str, ...], what: str) -> Database | None:
    files = sorted(f for p in patterns for f in directory.glob(p)) if directory is not None and directory.is_dir() else []
    if not files:
        return None
    db = Database("sqlite://")
    for path in files:
        import_jsonl(db, path)
    db.location = f"{what} ({directory})"
    return db
