"""`autosched db ...` on real SQLite files and PostgreSQL databases: stats, export → import, merge,
prune, best; bad files are one line; a PostgreSQL URL without its driver is one line too."""
import json
import sys

import onnx
import pytest
from db_helpers import HERE, measured

from autosched.cli import main
from autosched.database import Database
from autosched.target import Target
from autosched.zoo import mlp


@pytest.fixture
def filled(make_db, tasks):
    path = make_db("a")
    with Database(path) as db:
        db.commit(measured(tasks[0], HERE, [2e-3, None, 1e-3], t0=1e9))  # 2001-09-09
        db.commit(measured(tasks[1], HERE, [5e-3], t0=2e9))
    return path


def stats(capsys, path):
    assert main(["db", "stats", "--json", "--db", str(path)]) == 0
    return json.loads(capsys.readouterr().out)


def test_stats_is_one_json_object(filled, capsys):
    got = stats(capsys, filled)
    assert {k: got[k] for k in ("records", "failed", "workloads", "targets", "sessions")} == \
        {"records": 4, "failed": 1, "workloads": 2, "targets": 1, "sessions": 0}


def test_export_import_merge_prune_through_the_command_line(filled, make_db, tmp_path, capsys):
    out = tmp_path / "a.jsonl"
    assert main(["db", "export", "-o", str(out), "--db", str(filled)]) == 0
    assert len(out.read_text().splitlines()) == 4
    assert main(["db", "export", "--isa", "x86_64-avx2", "--db", str(filled)]) == 0
    assert capsys.readouterr().out == ""  # every record of the fixture is AVX-512
    b = make_db("b")
    assert main(["db", "import", str(out), "--db", str(b)]) == 0
    assert "4 records, 4 new" in capsys.readouterr().out
    assert main(["db", "merge", str(filled), "--db", str(b)]) == 0
    assert "0 new records" in capsys.readouterr().out
    assert main(["db", "prune", "--before", "2010-01-01", "--db", str(b)]) == 0
    assert "pruned 2 failed or superseded records" in capsys.readouterr().out
    assert stats(capsys, b)["records"] == 2


def test_best_lists_each_task_of_a_model_with_its_best_on_this_machine(db_url, tmp_path, tasks, capsys):
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(), model)
    path = db_url
    with Database(path) as db:
        db.commit(measured(tasks[0], Target.parse("llvm"), [2e-3, 1e-3]))
    assert main(["db", "best", str(model), "--db", str(path)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split()[:3] for r in rows[1:4]] == [["Gemm", "1", "1"], ["Gemm", "1", "-"], ["Gemm", "1", "-"]]
    assert rows[4] == "estimated latency of the tuned tasks: 1 ms"


def test_bad_database_files_are_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_text("hello\n")
    assert main(["db", "stats", "--db", str(bad)]) == 2
    assert capsys.readouterr().err == f"error: {bad}: not an SQLite database (not a tuning database, or overwritten)\n"


def test_the_environment_chooses_the_default_database(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AUTOSCHED_DB", str(tmp_path / "env.db"))
    assert main(["db", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["location"] == str(tmp_path / "env.db")
    monkeypatch.delenv("AUTOSCHED_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert main(["db", "stats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["location"] == str(tmp_path / "xdg" / "autosched" / "tuning.db")


def test_every_verb_names_the_extra_when_the_postgresql_driver_is_missing(tmp_path, monkeypatch, capsys):
    """psycopg hidden as if never installed: each of the 11 verbs that take --db says, in one line,
    which extra to install (and never shows the URL's password)."""
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(), model)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # `import psycopg` now fails
    url = "postgresql://team:secret@db.example/tuning"
    out = tmp_path / "out"
    verbs = [["tune", str(model), "--trials", "4", "--quiet"], ["build", str(model), "-o", str(out / "m.so")],
             ["check", str(model)], ["bench", str(model), "--runs", "1"], ["report", str(model), "-o", str(out / "r.html")],
             ["db", "import", str(tmp_path / "none.jsonl")], ["db", "export"], ["db", "stats"], ["db", "best", str(model)],
             ["db", "merge", str(tmp_path / "none.db")], ["db", "prune", "--before", "2026-11-01"]]
    for argv in verbs:
        assert main([*argv, "--db", url]) == 2, argv
        assert capsys.readouterr().err == ("error: postgresql://team:***@db.example/tuning: the database driver 'psycopg' "
                                           'is not installed: pip install "autosched[postgres]"\n'), argv


@pytest.mark.parametrize("url, said", [
    ("mongodb://me:secret@host/db", "mongodb://me:***@host/db: not a database URL autosched can open"),
    ("postgresql://me:secret@host:port/db", "postgresql://me:***@host:port/db: not a database URL (like postgresql://"),
    ("postgresql://me:secret@127.0.0.1:1/db", "postgresql://me:***@127.0.0.1:1/db: connection failed"),
])
def test_bad_database_urls_are_one_error_line_without_the_password(capsys, url, said):
    assert main(["db", "stats", "--db", url]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1 and "secret" not in err, err
