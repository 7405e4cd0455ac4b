"""What the commands do to database files: a command never creates or changes a file it only
reads from, works on a file it may not write, and leaves no empty database when it fails
before its first write."""
import os
import sqlite3

import onnx
import pytest
from db_helpers import FIXTURES, HERE, measured

from autosched.cli import main
from autosched.database import Database, DatabaseError
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
    assert not db.exists()


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
    out = tmp_path / "out"
    out.mkdir()
    snapshot = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    db = ["--db", str(filled)]
    for argv in (["db", "stats", *db], ["db", "export", "-o", str(out / "all.jsonl"), *db],
                 ["db", "best", str(model), *db], ["build", str(model), *db, "-o", str(out / "m.so")],
                 ["check", str(model), *db], ["bench", str(model), "--runs", "1", *db],
                 ["report", str(model), *db, "-o", str(out / "report.html")]):
        assert main(argv) == 0, (argv, capsys.readouterr().err)
    assert len((out / "all.jsonl").read_text().splitlines()) == 4
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == snapshot
    with pytest.raises(DatabaseError, match="read-only"):  # the open mode is what stops writes, even root's
        with Database(filled, read_only=True).reading() as conn:
            conn.exec_driver_sql("DELETE FROM records")
