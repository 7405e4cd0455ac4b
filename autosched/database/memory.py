"""Tuning databases in memory (SQLite): the empty one reads see before a new database's first
write, and the migrated copy through which a database of an older schema is read without
being upgraded (rewritten), whatever engine holds the original."""
from __future__ import annotations

from sqlalchemy import Column, Connection, Engine, MetaData, Table, UniqueConstraint, create_engine, insert, select
from sqlalchemy.pool import StaticPool

from autosched.database.location import DatabaseError
from autosched.database.migrations import migrate
from autosched.database.schema import SCHEMA_VERSION, metadata, schema_version


def memory_engine() -> Engine:
    """One in-memory SQLite database, the same whichever thread reads it."""
    return create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})


def empty_engine() -> Engine:
    """An empty tuning database in memory: what reads see before a new file's first write."""
    engine = memory_engine()
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
    return engine


def migrated_copy(engine: Engine, version: int) -> Engine:
    """A database of an older schema opened read-only, copied into memory and migrated there:
    reading a database must not upgrade (rewrite) it."""
    memory = memory_engine()
    if engine.dialect.name == "sqlite":
        source, copy = engine.raw_connection(), memory.raw_connection()
        try:
            if source.driver_connection is None or copy.driver_connection is None:  # both are open sqlite3 connections
                raise DatabaseError("cannot copy the database: its sqlite3 connection is closed")
            source.driver_connection.backup(copy.driver_connection)
        finally:
            source.close()
            copy.close()
    else:
        with engine.connect() as server, memory.begin() as copied:
            copy_tables(server, copied)
    engine.dispose()
    with memory.begin() as conn:
        migrate(conn, version)
    return memory


def copy_tables(source: Connection, dest: Connection) -> None:
    """Every table of the tuning database found in `source` (whatever its schema version),
    created in `dest` as it is there (columns, keys, unique constraints, in generic types) and
    filled with its rows: an older database read through another engine."""
    found = MetaData()
    found.reflect(source, only=lambda name, _meta: name in metadata.tables)
    made = MetaData()
    for table in found.sorted_tables:
        columns = [Column(c.name, c.type.as_generic(), primary_key=c.primary_key, nullable=c.nullable)
                   for c in table.columns]
        uniques = [UniqueConstraint(*(c.name for c in u.columns)) for u in table.constraints
                   if isinstance(u, UniqueConstraint)]
        Table(table.name, made, *columns, *uniques)
    made.create_all(dest)
    for table in found.sorted_tables:
        rows = [dict(row) for row in source.execute(select(table)).mappings()]
        if rows:
            dest.execute(insert(made.tables[table.name]), rows)
