"""The PostgreSQL server the database tests run against: started from the system's binaries,
one database per test, and nothing left when it stops (no process, no directory)."""
import os

import pytest

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL driver (the [test] extra) is not installed")
from postgres_server import PostgresServer  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402


def test_each_test_gets_its_own_empty_database(postgres_server):
    a, b = postgres_server.create_database("one"), postgres_server.create_database("two")
    assert a != b and a.startswith("postgresql://")
    with psycopg.connect(**postgres_server.conninfo(make_url(a).database)) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)


def test_a_stopped_server_leaves_no_process_and_no_directory(postgres_server):
    """A second server beside the session's (which says whether servers can run here at all)."""
    with PostgresServer.start() as server:
        root, pid = server.root, server.process.pid
        assert server.process.poll() is None and (root / "data" / "PG_VERSION").exists()
        if os.geteuid() == 0:  # initdb and postgres refuse root: they run as nobody
            assert (root / "data").stat().st_uid != 0
    assert not root.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
