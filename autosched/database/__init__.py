"""The tuning database: every measurement, where it was measured, and the queries a tune and a
build need. SQLite through SQLAlchemy by default (any SQLAlchemy URL is accepted)."""
from autosched.database.identity import TargetInfo, isa_of, tasks_digest
from autosched.database.jsonl import LogError, export_jsonl, import_jsonl, read_jsonl
from autosched.database.location import DatabaseError, default_location
from autosched.database.queries import Best, best, history
from autosched.database.schedules import TunedSchedules
from autosched.database.schema import SCHEMA_VERSION
from autosched.database.shipped import shipped_database, shipped_dir
from autosched.database.store import Database
from autosched.database.stored import StoredRecord
from autosched.database.writer import RecordWriter

__all__ = [
    "Best", "Database", "DatabaseError", "LogError", "RecordWriter", "SCHEMA_VERSION", "StoredRecord", "TargetInfo",
    "TunedSchedules", "best", "default_location", "export_jsonl", "history", "import_jsonl", "isa_of", "read_jsonl",
    "shipped_database", "shipped_dir", "tasks_digest",
]
