"""What the commands do to database files and server databases: a command never creates or
changes a database it only reads from, works on one it may not write, and leaves no empty
database (no tables, on a server) when it fails before its first write. Merges between SQLite
and PostgreSQL, both ways."""
import os
import sqlite3

import onnx
import pytest
from db_helpers import FIXTURES, HERE, execute, measured, older_database
from sqlalchemy.engine import make_url

from autosched.cli import main
from autosched.database import SCHEMA_VERSION, Database, DatabaseError
from autosched.target import Target
from autosched.zoo import mlp


@pytest.fixture
def filled(tmp_path, tasks):
    path = tmp_path / "a.db"
    with Database(path) as db:
        db.commit(measured(tasks[0], HERE, [2e-3, None, 1e-3], t0=1e9))
        db.commit(measured(tasks[1], HERE, [5e-3], t0=2e9))
    return path


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    return path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_merge_from_a_missing_file_fails_and_creates_nothing(filled, tmp_path, capsys):
    missing = tmp_path / "nosuch.db"
    assert main(["db", "merge", str(missing), "--db", str(filled)]) == 2
    assert f"{missing}: no such file; nothing merged" in _one_error_line(capsys)
    assert not missing.exists()


@pytest.mark.parametrize("content", [b"", b"my notes, not a database\n"])
def test_merge_never_rewrites_a_source_that_is_not_a_database(filled, tmp_path, capsys, content):
    source = tmp_path / "source.db"
    source.write_bytes(content)
    assert main(["db", "merge", str(source), "--db", str(filled)]) == 2
    assert str(source) in _one_error_line(capsys)
    assert source.read_bytes() == content


def test_merge_reads_its_source_without_writing_it(filled, tmp_path, capsys):
    """Not even to migrate it: a source of an older schema is read through a migrated copy."""
    old = tmp_path / "v1.db"
    with sqlite3.connect(old) as conn:
        conn.executescript((FIXTURES / "tuning_v1.sql").read_text())
    for source, new in ((filled, 4), (old, 2)):
        before = source.read_bytes()
        assert main(["db", "merge", str(source), "--db", str(tmp_path / "into.db")]) == 0
        assert capsys.readouterr().out.startswith(f"{new} new records from {source}")
        assert source.read_bytes() == before


def test_a_failed_import_says_nothing_was_imported_and_creates_no_database(filled, tmp_path, capsys):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    assert main(["db", "export", "-o", str(good), "--db", str(filled)]) == 0
    lines = good.read_text().splitlines()
    bad.write_text("\n".join(lines[:1] + ["{not a record"] + lines[1:]) + "\n")
    db = tmp_path / "new.db"
    capsys.readouterr()
    assert main(["db", "import", str(good), str(bad), "--db", str(db)]) == 2
    assert f"0 imported: {bad}:2: not a measurement record" in _one_error_line(capsys)
    assert not db.exists()


@pytest.mark.parametrize("argv", [["tune", "--trials", "0"], ["tune", "--trials", "4", "--tuner", "nosuch"]])
def test_a_tune_refused_before_measuring_creates_no_database(model, tmp_path, capsys, argv):
    db = tmp_path / "new.db"
    assert main([argv[0], str(model), *argv[1:], "--quiet", "--db", str(db)]) == 2
    _one_error_line(capsys)
    assert not db.exists()


def test_commands_with_nothing_to_write_never_create_the_database(model, tmp_path, capsys):
    db = tmp_path / "never.db"
    assert main(["db", "stats", "--db", str(db)]) == 0
    assert main(["build", str(model), "--no-shipped", "--db", str(db), "-o", str(tmp_path / "m.so")]) == 0
    assert main(["db", "prune", "--before", "2026-11-01", "--db", str(db)]) == 0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["db", "import", str(empty), "--db", str(db)]) == 0
    no_records = tmp_path / "sessions-only.db"
    with Database(no_records) as other:
        other.start_session("m.onnx", HERE, 1)
    for argv in (["db", "export"], ["db", "export", "-o", str(tmp_path / "all.jsonl")], ["db", "best", str(model)],
                 ["db", "merge", str(no_records)]):
        assert main([*argv, "--db", str(db)]) == 0
    assert "wrote 0 records to standard output\n" in capsys.readouterr().err
    assert not db.exists()


def _every_reading_verb(model, location, out, capsys):
    """Each verb that only reads succeeds on `location` (which holds 4 records of this machine)."""
    out.mkdir()
    db = ["--db", location]
    for argv in (["db", "stats", *db], ["db", "export", "-o", str(out / "all.jsonl"), *db],
                 ["db", "best", str(model), *db], ["build", str(model), *db, "-o", str(out / "m.so")],
                 ["check", str(model), *db], ["bench", str(model), "--runs", "1", *db],
                 ["report", str(model), *db, "-o", str(out / "report.html")]):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
    assert len((out / "all.jsonl").read_text().splitlines()) == 4


def test_reading_commands_work_on_a_read_only_database(tasks, model, tmp_path, monkeypatch, capsys):
    """Tests run as root, where chmod 444 stops no write: the file is made read-only and
    `os.access` answers for it as it does for any other user (no write to the file or its
    directory), and every file of the directory must come out byte for byte as it was."""
    filled = tmp_path / "a.db"
    with Database(filled) as db:  # records of this machine, for `report`
        db.commit(measured(tasks[0], Target.parse("llvm"), [2e-3, None, 1e-3, 3e-3]))
    filled.chmod(0o444)
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and os.path.abspath(path) in (str(filled), str(filled.parent)):
            return False
        return real_access(path, mode, *args, **kwargs)
    monkeypatch.setattr(os, "access", access)
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    _every_reading_verb(model, str(filled), tmp_path / "out", capsys)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == snapshot
    with pytest.raises(DatabaseError, match="read-only"):  # the open mode is what stops writes, even root's
        with Database(filled, read_only=True).reading() as conn:
            conn.exec_driver_sql("DELETE FROM records")


def _counts(location):
    return execute(location, "SELECT (SELECT count(*) FROM records), (SELECT count(*) FROM workloads), "
                             "(SELECT count(*) FROM targets), (SELECT max(version) FROM schema_version)")[0]


def test_merge_from_sqlite_into_postgresql_and_back(filled, postgres_server, tmp_path, capsys):
    """Counts equal both ways, no duplicates on a second merge, and the source never changes: not
    even a source of an older schema on the server, which a merge reads without migrating."""
    server = postgres_server.create_database("merged")
    before = filled.read_bytes()
    assert main(["db", "merge", str(filled), "--db", server]) == 0
    assert capsys.readouterr().out.startswith(f"4 new records from {filled} into {server}")
    assert filled.read_bytes() == before
    assert _counts(server) == _counts(filled) == (4, 2, 1, SCHEMA_VERSION)
    back = tmp_path / "back.db"
    for _ in range(2):
        assert main(["db", "merge", server, "--db", str(back)]) == 0
        assert main(["db", "merge", str(filled), "--db", server]) == 0
    assert capsys.readouterr().out.splitlines()[::2] == [f"4 new records from {server} into {back}",
                                                        f"0 new records from {server} into {back}"]
    assert _counts(back) == _counts(server) == (4, 2, 1, SCHEMA_VERSION)
    with Database(back) as a, Database(server) as b:
        assert list(a.stored()) == list(b.stored())
    old = postgres_server.create_database("old")
    older_database(1, old)
    assert main(["db", "merge", old, "--db", str(back)]) == 0
    assert capsys.readouterr().out.startswith(f"2 new records from {old} into {back}")
    assert _counts(old) == (2, 1, 1, 1)


def test_reading_commands_need_no_write_access_to_a_postgresql_database(tasks, model, postgres_server, tmp_path, capsys):
    """A team member's role may only SELECT: every verb that only reads works with it, and a
    read-only open refuses writes on the server even for the owner (READ ONLY transactions)."""
    owner = postgres_server.create_database("shared")
    with Database(owner) as db:
        db.commit(measured(tasks[0], Target.parse("llvm"), [2e-3, None, 1e-3, 3e-3]))
    reader = f"reader_{make_url(owner).database}"  # roles are the server's, not one database's
    execute(owner, f"CREATE ROLE {reader} LOGIN", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
    url = owner.replace("postgresql://autosched@", f"postgresql://{reader}@")
    _every_reading_verb(model, url, tmp_path / "out", capsys)
    capsys.readouterr()
    assert main(["db", "prune", "--before", "2100-01-01", "--db", url]) == 2  # a verb that writes says why it cannot
    assert "permission denied for table records" in _one_error_line(capsys)
    with pytest.raises(DatabaseError, match="read-only"):
        with Database(owner, read_only=True).reading() as conn:
            conn.exec_driver_sql("DELETE FROM records")
    assert _counts(owner) == (4, 1, 1, SCHEMA_VERSION)


def test_reading_an_empty_postgresql_database_creates_no_tables(model, postgres_server, tmp_path, capsys):
    """What `createdb tuning` makes reads as an empty tuning database; the first write makes the tables."""
    url = postgres_server.create_database("empty")
    assert main(["db", "stats", "--json", "--db", url]) == 0
    assert '"records": 0' in capsys.readouterr().out
    assert main(["build", str(model), "--no-shipped", "--db", url, "-o", str(tmp_path / "m.so")]) == 0
    assert main(["db", "prune", "--before", "2026-11-01", "--db", url]) == 0
    assert execute(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]
    assert main(["db", "import", str(tmp_path / "none.jsonl"), "--db", url]) == 2
    assert execute(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]
