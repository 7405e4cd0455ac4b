"""Tuning records made up for the database, report, progress and CLI tests: a fixed target
(not this host's, so stored fingerprints do not depend on the machine) and measured costs."""
from pathlib import Path

from sqlalchemy import select

from autosched.database.schema import claims
from autosched.measure import ErrorKind, MeasureInput, MeasureResult
from autosched.target import CpuInfo, Target
from autosched.templates import get_template

AVX512 = frozenset({"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
HERE = Target.parse("llvm", host=CpuInfo("Example CPU A", AVX512))


def measured(task, target, costs, t0=1000.0):
    """Records of `task` on `target`: config i gets costs[i] (None: a compile error)."""
    space = get_template(task.op, target.kind).space(task, target)
    out = []
    for i, cost in enumerate(costs):
        res = (MeasureResult((cost, cost), ErrorKind.NO_ERROR, "", 0.1, t0 + i) if cost is not None
               else MeasureResult.failure(ErrorKind.COMPILE_ERROR, "gcc: error", 0.1, t0 + i))
        out.append((MeasureInput(task, target, space.get(i)), res))
    return out


#: SQL dumps of tuning databases of earlier schema versions
FIXTURES = Path(__file__).parent / "fixtures"


def engine_of(location):
    """An SQLAlchemy engine straight onto a test database (a path or URL), for what a test does
    behind autosched's back: forging rows, an older schema, another application's tables."""
    from sqlalchemy import create_engine

    from autosched.database.location import is_url, parse_url
    return create_engine(parse_url(location) if is_url(str(location)) else f"sqlite:///{location}")


def execute(location, *statements):
    """Run SQL statements on a test database in one transaction; returns the last one's rows."""
    from sqlalchemy import text
    engine = engine_of(location)
    try:
        with engine.begin() as conn:
            for statement in statements:
                result = conn.execute(text(statement))
            return result.all() if result.returns_rows else None
    finally:
        engine.dispose()


def older_database(version, location):
    """A tuning database of an older schema at `location`, from its fixture (an SQLite dump of a
    real file of that version). On a server its tables are made as that version's autosched made
    them there, through SQLAlchemy (keys, unique constraints, serial ids), and filled with its rows."""
    import sqlite3

    from sqlalchemy import create_engine, text

    from autosched.database.location import is_url
    from autosched.database.memory import copy_tables
    dump = (FIXTURES / f"tuning_v{version}.sql").read_text()
    if not is_url(str(location)):
        with sqlite3.connect(location) as conn:
            conn.executescript(dump)
        return
    memory = create_engine("sqlite://")
    with memory.connect() as source:
        source.connection.driver_connection.executescript(dump)
        server = engine_of(location)
        with server.begin() as dest:
            copy_tables(source, dest)
            for table in ("records", "sessions", "targets", "workloads"):  # serial ids go on after the copied rows
                dest.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"))
        server.dispose()


def held(db):
    """Every claim now in `db` (a Database), oldest first, as dicts of its columns."""
    with db.reading() as conn:
        return [dict(r) for r in conn.execute(select(claims).order_by(claims.c.id)).mappings()]
