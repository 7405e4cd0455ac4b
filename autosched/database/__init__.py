"""The tuning database: every measurement, where it was measured, and the queries a tune and a
build need. SQLite through SQLAlchemy by default (any SQLAlchemy URL is accepted)."""
from autosched.database.claims import ClaimBook, ClaimStats, Owner
from autosched.database.identity import TargetInfo, isa_of, tasks_digest
from autosched.database.jsonl import LogError, export_jsonl, import_jsonl, read_jsonl
from autosched.database.location import DatabaseError, default_location
from autosched.database.queries import Best, best, history, latest_record, pretraining
from autosched.database.schedules import TunedSchedules
from autosched.database.schema import SCHEMA_VERSION
from autosched.database.sharing import SharedTuning
from autosched.database.shipped import shipped_database, shipped_dir, training_database
from autosched.database.store import Database
from autosched.database.stored import StoredRecord
from autosched.database.writer import RecordWriter

__all__ = [
    "Best", "ClaimBook", "ClaimStats", "Database", "DatabaseError", "LogError", "Owner", "RecordWriter",
    "SCHEMA_VERSION", "SharedTuning", "StoredRecord", "TargetInfo", "TunedSchedules", "best", "default_location",
    "export_jsonl", "history", "import_jsonl", "isa_of", "latest_record", "pretraining", "read_jsonl",
    "shipped_database", "shipped_dir", "tasks_digest", "training_database",
]
