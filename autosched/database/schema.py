"""The tuning database's tables (SQLAlchemy Core) and the schema version they make.

One row per measurement, appended as it is measured; typed columns, no pickled blobs. A
workload is a task key in one space version (the space depends on the target's ISA, and a
template change makes a new version), so a record is always read back against the space it
was measured in. Bump `SCHEMA_VERSION` with every change here and add its step to
`migrations.MIGRATIONS`.
"""
from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text, UniqueConstraint

#: version 1: the first schema; 2: records.node (the fleet machine that measured a record);
#: 3: sessions.search_s; 4: sessions.tasks (what model a session tuned, wherever its file lies);
#: 5: claims (configs being measured now, so that concurrent tuners measure each once);
#: 6: verdicts (whether a task's tuned config made the whole model faster, timed in the model),
#: kernel_times and model_times (kernels and whole builds timed in the model: the latency model);
#: 7: records.caches and records.threads (how a record was timed)
SCHEMA_VERSION = 7

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

targets = Table(
    "targets", metadata,
    Column("id", Integer, primary_key=True),
    Column("target", Text, nullable=False),        # the target string a user typed, canonical form
    Column("fingerprint", Text, nullable=False),   # CPU model and ISA flags, or GPU arch
    Column("isa", Text, nullable=False),           # coarse ISA class: records never cross it
    Column("compiler", String(64)),
    UniqueConstraint("target", "fingerprint"),
)

workloads = Table(
    "workloads", metadata,
    Column("id", Integer, primary_key=True),
    Column("key", Text, nullable=False),           # Task.key: canonical JSON of the task's structure
    Column("op", String(64), nullable=False),
    Column("shapes", Text, nullable=False),        # JSON list of input shapes, for people and reports
    # one occurrence; unknown for imported logs. 64-bit where INTEGER is 32 (PostgreSQL: a 1024³ matmul
    # has 2³¹ flops); SQLite's INTEGER holds 64 bits already, and its files keep their declared type
    Column("flops", BigInteger().with_variant(Integer(), "sqlite")),
    Column("template", String(128), nullable=False),
    Column("space", String(32), nullable=False),   # ConfigSpace.fingerprint
    UniqueConstraint("key", "space"),
)

sessions = Table(
    "sessions", metadata,
    Column("id", Integer, primary_key=True),
    Column("model", Text, nullable=False),
    Column("target_id", Integer, ForeignKey("targets.id")),
    Column("trials_asked", Integer, nullable=False),
    Column("trials_done", Integer, nullable=False, default=0),
    Column("status", String(16), nullable=False),  # running, done, interrupted, failed
    Column("started", Float, nullable=False),
    Column("ended", Float),
    Column("search_s", Float, nullable=False, default=0.0),  # tuners proposing and fitting cost models
    Column("tasks", String(64)),  # tasks_digest of the model's tasks; NULL in sessions of schema 3 and older
)

records = Table(
    "records", metadata,
    Column("id", Integer, primary_key=True),
    Column("workload_id", Integer, ForeignKey("workloads.id"), nullable=False),
    Column("target_id", Integer, ForeignKey("targets.id"), nullable=False),
    Column("session_id", Integer, ForeignKey("sessions.id")),
    Column("config", Text, nullable=False),        # Config.to_json(), canonical (sorted keys)
    Column("costs", Text, nullable=False),         # JSON list of seconds, [] for failures
    Column("cost", Float),                         # median of costs; NULL for failures
    Column("error_kind", String(32), nullable=False),
    Column("error_msg", Text, nullable=False),
    Column("build_s", Float, nullable=False),
    Column("run_s", Float),
    Column("tuner", String(32)),
    Column("version", String(32)),                 # autosched's version
    Column("timestamp", Float, nullable=False),
    Column("node", Text),
    Column("caches", String(16)),                  # warm, cold or flushed (`measure/caches.py`); NULL: warm, untold
    Column("threads", Integer),                    # threads it ran on; NULL: not recorded
    UniqueConstraint("workload_id", "target_id", "config", "timestamp"),
)

Index("records_by_workload", records.c.workload_id, records.c.target_id, records.c.cost)

claims = Table(
    "claims", metadata,
    Column("id", Integer, primary_key=True),
    Column("workload_id", Integer, ForeignKey("workloads.id"), nullable=False),
    Column("target_id", Integer, ForeignKey("targets.id"), nullable=False),
    Column("config", Text, nullable=False),        # as records.config: the key a record of it will have
    Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False),  # the tuner holding it
    Column("host", Text, nullable=False),          # its machine and process: a dead owner on this host
    Column("pid", Integer, nullable=False),        # is known dead at once, others by their lease
    Column("expires", Float, nullable=False),      # Unix time; renewed while its tuner works
    UniqueConstraint("workload_id", "target_id", "config"),
)

verdicts = Table(
    "verdicts", metadata,
    Column("id", Integer, primary_key=True),
    # keyed by what a build looks up, not by row ids: a verdict may judge a shipped record's config
    Column("task", String(64), nullable=False),    # SHA-256 of Task.key
    Column("fingerprint", Text, nullable=False),   # the machine the model was timed on
    Column("config", Text, nullable=False),        # as records.config
    Column("wins", Integer, nullable=False),       # 1: the model ran faster with it than with the default
    Column("with_ms", Float, nullable=False),      # median model latency with the config
    Column("without_ms", Float, nullable=False),   # the same model with this task on its default schedule
    Column("session_id", Integer, ForeignKey("sessions.id")),
    Column("timestamp", Float, nullable=False),
    UniqueConstraint("task", "fingerprint", "config"),
)

kernel_times = Table(
    "kernel_times", metadata,
    Column("id", Integer, primary_key=True),
    Column("task", String(64), nullable=False),    # SHA-256 of Task.key
    Column("fingerprint", Text, nullable=False),
    Column("config", Text, nullable=False),        # as records.config; "" for a task's default schedule
    Column("seconds", Float, nullable=False),      # one call's median time inside the built model
    Column("session_id", Integer, ForeignKey("sessions.id")),
    Column("timestamp", Float, nullable=False),
    UniqueConstraint("task", "fingerprint", "config"),
)

model_times = Table(
    "model_times", metadata,
    Column("id", Integer, primary_key=True),
    Column("tasks", String(64), nullable=False),   # tasks_digest of the model's tasks
    Column("fingerprint", Text, nullable=False),
    Column("threads", Integer, nullable=False),
    Column("tuned_ms", Float, nullable=False),     # median latency of the build `autosched build` makes
    Column("untuned_ms", Float, nullable=False),   # of the untuned build, timed alternately with it
    Column("kernels_ms", Float, nullable=False),   # the tuned build's kernel calls, timed inside it
    Column("calls", Integer, nullable=False),      # kernel calls per run
    Column("session_id", Integer, ForeignKey("sessions.id")),
    Column("timestamp", Float, nullable=False),
)
