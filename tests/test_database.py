"""The tuning database on real SQLite files and on a real PostgreSQL server (tests taking `db_url`
or `make_db` run on both; `-k postgres` selects the server's): records in and out, the queries a
tune and a build use, JSON lines, merge and prune, migrations, bad files and several writers at once."""
import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from db_helpers import AVX512, HERE, execute, measured, older_database

from autosched.database import (
    SCHEMA_VERSION,
    ClaimBook,
    Database,
    DatabaseError,
    LogError,
    Owner,
    RecordWriter,
    StoredRecord,
    best,
    export_jsonl,
    history,
    import_jsonl,
    isa_of,
)
from autosched.database.queries import config_cost
from autosched.measure import RecordError, record_to_json
from autosched.target import CpuInfo, Target
from autosched.zoo import mlp

OTHER_CPU = Target.parse("llvm", host=CpuInfo("Example CPU B", AVX512))
OTHER_ISA = Target.parse("llvm", host=CpuInfo("Example CPU C", frozenset({"avx", "avx2", "fma"})))


def test_records_round_trip_and_a_batch_is_stored_once(db_url, tasks):
    db = Database(db_url)
    recs = measured(tasks[0], HERE, [3e-3, None, 1e-3])
    assert db.commit(recs) == 3
    assert db.commit(recs) == 0  # same workload, target, config and time: already there
    got = history(db, tasks, HERE)[tasks[0].key]
    assert [(i.config, r) for i, r in got] == [(i.config, r) for i, r in recs]
    found = best(db, tasks[0], HERE)
    assert found.config == recs[2][0].config and found.cost == 1e-3 and found.fingerprint == HERE.fingerprint
    assert db.stats() | {"location": None} == {"location": None, "schema_version": SCHEMA_VERSION, "records": 3,
                                               "failed": 1, "workloads": 1, "targets": 1, "sessions": 0,
                                               "claims": 0, "verdicts": 0}


def test_flop_counts_past_32_bits_are_stored(db_url, tasks):
    """A 1024³ matmul has 2³¹ flops: PostgreSQL's INTEGER would refuse it."""
    big = dataclasses.replace(StoredRecord.of(measured(tasks[0], HERE, [1e-3])[0]), flops=2**31 * 8)
    db = Database(db_url)
    assert db.insert([big]) == 1
    assert [s.flops for s in db.stored()] == [2**34]


def test_history_transfers_records_of_the_same_template_from_other_workloads(db_url, tasks):
    db = Database(db_url)
    db.commit(measured(tasks[0], HERE, [2e-3, 1e-3]))
    got = history(db, tasks[1:], HERE)  # a model without tasks[0]: its records come as transfer
    assert tasks[1].key not in got
    [(inp, _), _] = got[tasks[0].key]
    assert inp.task == tasks[0].__class__(**{**tasks[0].__dict__, "weight": 1})  # rebuilt from its key
    assert history(db, tasks[1:], OTHER_ISA) == {}  # never across an ISA


def test_best_prefers_this_cpu_then_the_same_isa_never_another(db_url, tasks):
    db = Database(db_url)
    task = tasks[0]
    db.commit(measured(task, OTHER_CPU, [1e-3, 5e-4]))
    assert best(db, task, HERE).fingerprint == OTHER_CPU.fingerprint
    assert best(db, task, OTHER_ISA) is None
    db.commit(measured(task, HERE, [2e-3], t0=2000.0))
    found = best(db, task, HERE)
    assert (found.cost, found.fingerprint) == (2e-3, HERE.fingerprint)  # slower, but measured here
    assert isa_of(HERE) == isa_of(OTHER_CPU) != isa_of(OTHER_ISA)


def test_records_keep_how_they_were_timed_and_a_best_is_compared_within_one_cache_mode(db_url, tasks, tmp_path):
    """Cold timings are slower by the weights' loads: the task's best comes from the mode it was
    last tuned in, and a tuned config is weighed against the default timed the same way."""
    db = Database(db_url)
    task = tasks[0]

    def timed(recs, caches):
        return [(inp, dataclasses.replace(res, caches=caches, threads=2)) for inp, res in recs]

    db.commit(measured(task, HERE, [1e-3, 5e-4]))  # older records: mode untold, timed warm
    assert (best(db, task, HERE).cost, best(db, task, HERE).caches) == (5e-4, "warm")
    db.commit(timed(measured(task, HERE, [None, 3e-3, 2e-3], t0=2000.0), "cold"))
    found = best(db, task, HERE)
    assert (found.cost, found.caches, found.config.index) == (2e-3, "cold", 2)
    default = found.config.space.get(1)
    assert config_cost(db, task, HERE, default, "cold") == 3e-3 and config_cost(db, task, HERE, default) == 5e-4
    stored = list(db.stored())
    assert [(s.result.caches, s.result.threads) for s in stored] == [(None, None)] * 2 + [("cold", 2)] * 3
    with open(tmp_path / "out.jsonl", "w") as f:
        export_jsonl(db, f)
    copy = Database(tmp_path / "copy.db")
    import_jsonl(copy, tmp_path / "out.jsonl")
    assert [(s.result.caches, s.result.threads) for s in copy.stored()] == [(s.result.caches, s.result.threads)
                                                                            for s in stored]
    with pytest.raises(RecordError, match="caches must be one of warm, cold, flushed or None, got 'hot'"):
        dataclasses.replace(stored[-1].result, caches="hot")


def test_records_outside_their_space_are_skipped_with_a_warning_naming_them(db_url, tasks, caplog):
    db = Database(db_url)
    recs = measured(tasks[0], HERE, [1e-3, 2e-3])
    db.commit(recs)
    forged = json.dumps({**recs[1][0].config.to_json(), "index": 0})  # index 0 with the knobs of index 1
    execute(db_url, f"UPDATE records SET config = '{forged}' WHERE id = 1")
    with caplog.at_level(logging.WARNING, "autosched.database"):
        assert best(db, tasks[0], HERE).cost == 2e-3
        assert len(history(db, tasks, HERE)[tasks[0].key]) == 1
    assert "record 1 (Gemm 64x784) skipped" in caplog.text
    execute(db_url, "UPDATE workloads SET space = '0000000000000000'")  # another space version of the template
    caplog.clear()
    with caplog.at_level(logging.WARNING, "autosched.database"):
        assert history(db, tasks, HERE) == {} and best(db, tasks[0], HERE) is None
    assert "2 records of task Gemm 64x784 skipped: measured in another space version" in caplog.text


def test_export_import_round_trip_and_merge_without_duplicates(make_db, tmp_path, tasks):
    a = Database(make_db("a"))
    a.commit(measured(tasks[0], HERE, [1e-3, None]), tuner="xgb")
    a.commit(measured(tasks[1], OTHER_CPU, [4e-4]))
    out = tmp_path / "a.jsonl"
    with open(out, "w") as f:
        assert export_jsonl(a, f) == 3
    b = Database(make_db("b"))
    assert import_jsonl(b, out) == (3, 3)
    assert import_jsonl(b, out) == (3, 0)
    assert list(b.stored()) == list(a.stored())
    c = Database(make_db("c"))
    c.commit(measured(tasks[2], HERE, [1e-5]))
    assert c.merge(a) == 3 and c.merge(a) == 0 and c.merge(b) == 0
    assert c.stats()["records"] == 4


def test_merge_skips_duplicates(make_db, tasks):
    """ON CONFLICT DO NOTHING on the records' unique key, on SQLite and on the PostgreSQL server."""
    a, c = Database(make_db("a")), Database(make_db("c"))
    a.commit(measured(tasks[0], HERE, [1e-3, None, 2e-3]))
    c.commit(measured(tasks[0], HERE, [1e-3]))
    assert c.merge(a) == 2 and c.merge(a) == 0
    assert c.stats()["records"] == 3
    assert sorted(s.result.timestamp for s in c.stored()) == [1000.0, 1001.0, 1002.0]


def test_merge_skips_duplicates_on_an_engine_without_on_conflict(tmp_path, tasks, monkeypatch):
    """Engines other than SQLite, PostgreSQL and MySQL get the rows already present filtered out
    first: that path runs here on SQLite with its dialect renamed (no such server here)."""
    a, c = Database(tmp_path / "a.db"), Database(tmp_path / "c.db")
    a.commit(measured(tasks[0], HERE, [1e-3, None, 2e-3]))
    c.commit(measured(tasks[0], HERE, [1e-3]))
    monkeypatch.setattr(c._engine.dialect, "name", "generic")
    assert c.merge(a) == 2 and c.merge(a) == 0
    assert c.stats()["records"] == 3


def test_import_reads_todays_logs_as_measured_on_this_host(db_url, tmp_path, tasks):
    host = Target.parse("llvm")
    log = tmp_path / "old.jsonl"
    log.write_text("".join(json.dumps(record_to_json(i, r)) + "\n" for i, r in measured(tasks[0], host, [1e-3, 2e-3])))
    db = Database(db_url)
    assert import_jsonl(db, log) == (2, 2)
    assert best(db, tasks[0], host).cost == 1e-3


def test_import_refuses_a_malformed_line_naming_it_and_stores_nothing(db_url, tmp_path, tasks):
    log = tmp_path / "bad.jsonl"
    good = json.dumps(record_to_json(*measured(tasks[0], HERE, [1e-3])[0]))
    log.write_text(good + "\n\n" + good.replace('"costs"', '"cost"') + "\n")
    db = Database(db_url)
    with pytest.raises(LogError, match=rf"{log}:3: not a measurement record"):
        import_jsonl(db, log)
    assert db.stats()["records"] == 0
    with pytest.raises(LogError, match="cannot read"):
        import_jsonl(db, tmp_path / "missing.jsonl")


def test_prune_drops_failed_and_superseded_records_before_a_date_keeping_each_best(db_url, tasks):
    db = Database(db_url)
    db.commit(measured(tasks[0], HERE, [3e-3, None, 1e-3, 2e-3], t0=1000.0))
    db.commit(measured(tasks[1], HERE, [5e-3, None], t0=5000.0))
    assert db.prune(before=2000.0) == 3
    left = sorted((s.key == tasks[0].key, s.result.error_kind.name) for s in db.stored())
    assert left == [(False, "COMPILE_ERROR"), (False, "NO_ERROR"), (True, "NO_ERROR")]
    assert best(db, tasks[0], HERE).cost == 1e-3


def test_sessions_count_what_their_writer_committed(db_url, tasks):
    db = Database(db_url)
    session = db.start_session("mlp.onnx", HERE, trials=8)
    writer = RecordWriter(db, session, "random")
    recs = measured(tasks[0], HERE, [1e-3, 2e-3, None])
    writer([i for i, _ in recs], [r for _, r in recs])
    assert db.end_session(session, "interrupted") == 3 == writer.written
    assert db.stats()["sessions"] == 1


@pytest.mark.parametrize("version, nodes", [(1, [None, None]), (2, ["node-a", None]), (3, ["node-a", None]),
                                            (4, ["node-a", None]), (5, ["node-a", None]),
                                            (6, ["node-a", None])])
def test_databases_of_older_schemas_are_migrated(db_url, tasks, version, nodes):
    """Fixtures are dumps of real files of each older version (v2: v1 migrated by that version's
    code, v3: v2 migrated by v3's, v4: v3 by v4's, v5: v4 by v5's, v6: v5 by v6's); on PostgreSQL the same tables
    and rows are made on the server. A read-only open reads a migrated copy and leaves the
    database as it was; the first open that may write migrates it, and it takes new records after."""
    older_database(version, db_url)
    expected = {"location": None, "schema_version": SCHEMA_VERSION, "records": 2, "failed": 1, "workloads": 1,
                "targets": 1, "sessions": 1, "claims": 0, "verdicts": 0}
    with Database(db_url, read_only=True) as db:
        assert db.stats() | {"location": None} == expected
        assert [s.node for s in db.stored()] == nodes
    assert execute(db_url, "SELECT version FROM schema_version") == [(version,)]
    db = Database(db_url)
    assert db.stats() | {"location": None} == expected
    assert [s.node for s in db.stored()] == nodes
    assert [(s["search_s"], s["tasks"]) for s in db.sessions()] == [(0.0, None)]
    assert execute(db_url, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    recs = measured(tasks[0], HERE, [1e-3, None])
    assert db.commit(recs) == 2 and db.commit(recs) == 0
    assert db.stats()["records"] == 4 and best(db, tasks[0], HERE).cost == 1e-3
    claims = ClaimBook(db, Owner(db.start_session("m.onnx", HERE, 1), "host-a", 1))  # schema 5's table
    assert claims.claim([inp for inp, _ in measured(tasks[0], HERE, [1e-3] * 3)]) == [False, False, True]


def test_a_newer_schema_is_refused_naming_the_database_and_both_versions(db_url):
    with Database(db_url) as db:
        db.start_session("m.onnx", HERE, 1)  # the first write creates the tables
        shown = db.location
    execute(db_url, "UPDATE schema_version SET version = 99")
    with pytest.raises(DatabaseError, match=rf"{re.escape(shown)}: schema version 99 is newer than this "
                                            rf"autosched's {SCHEMA_VERSION}"):
        Database(db_url)


def test_a_database_of_another_application_is_refused(db_url):
    execute(db_url, "CREATE TABLE notes (body TEXT)")
    with pytest.raises(DatabaseError, match=r"a database, but not a tuning database \(tables: notes\)"):
        Database(db_url)
    with pytest.raises(DatabaseError, match="not a tuning database"):
        Database(db_url, read_only=True)


def test_bad_files_give_one_error_naming_the_file(tmp_path, tasks):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n")
    with pytest.raises(DatabaseError, match=rf"{text}: not an SQLite database"):
        Database(text)
    with pytest.raises(DatabaseError, match=rf"{tmp_path}: is a directory"):
        Database(tmp_path)
    good = tmp_path / "good.db"
    with Database(good) as db:
        db.commit(measured(tasks[0], HERE, list(np.linspace(1e-3, 2e-3, 200))))
    data = good.read_bytes()
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(data[:4096] + bytes(range(256)) * ((len(data) - 4096) // 256))
    for path in (truncated, corrupt):
        with pytest.raises(DatabaseError, match=rf"{path}: the tuning database is corrupt or truncated"):
            Database(path).stats()


def test_a_path_that_cannot_be_written_is_refused_naming_the_file():
    db = Database("/proc/autosched.db")  # read-only even for root; nothing to read there: an empty database
    assert db.stats()["records"] == 0
    with pytest.raises(DatabaseError, match="/proc/autosched.db: cannot open or create the tuning database"):
        db.start_session("m.onnx", HERE, 1)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes read-only files")
def test_a_read_only_database_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "ro.db"
    with Database(path) as db:
        db.start_session("m.onnx", HERE, 1)
    path.chmod(0o444)
    with pytest.raises(DatabaseError, match=rf"{path}: the tuning database is read-only"):
        Database(path)


@pytest.mark.slow
def test_two_processes_creating_one_database_both_start(tmp_path):
    """Two processes whose first writes create one new file at the same moment: SQLite answers
    the second switch to WAL mode with "database is locked" at once, whatever the busy timeout,
    so the switch is retried (`location._wal`). Before, 9 of 80 such starts failed (EPYC Zen 4, 2
    vCPUs); the default suite's two-writer test below failed on it once in CI."""
    script = textwrap.dedent("""
        import sys, time
        from autosched.database import Database
        db = Database(sys.argv[1])
        while time.time() < float(sys.argv[2]):
            pass
        with db.writing():
            pass
    """)
    for k in range(30):
        start = time.time() + 1.0
        procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / f"{k}.db"), str(start)],
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        errors = [p.communicate()[1] for p in procs]
        assert [p.returncode for p in procs] == [0, 0], errors


def test_two_processes_write_one_database_at_once(db_url, tmp_path, tasks):
    """Two writers start on a database without tables and each commits 60 batches of its own
    records of three tasks, and 20 batches of records both have (a merge of one source from two
    machines), while the other does: no 'database is locked', no deadlock, no duplicate target
    or workload, nothing lost, and the new records each says it added sum to what is stored."""
    script = textwrap.dedent("""
        import sys, onnx
        sys.path.insert(0, sys.argv[3])
        from db_helpers import measured, HERE
        from autosched.database import Database
        from autosched.frontend.onnx import load_onnx
        from autosched.graph.passes import optimize
        from autosched.task import extract_tasks
        tasks = extract_tasks(optimize(load_onnx(sys.argv[2]))).tasks
        db = Database(sys.argv[1])
        own = [r for i, t in enumerate(tasks) for r in measured(t, HERE, [1e-3] * 40, t0=float(sys.argv[4]) + i * 100)]
        shared = measured(tasks[0], HERE, [2e-3] * 40, t0=3e6)
        added = 0
        for k in range(0, 120, 2):
            added += db.commit(own[k:k + 2])
            if k % 6 == 0:
                added += db.commit(shared[k // 3:k // 3 + 2])
        print(added)
    """)
    model = tmp_path / "mlp.onnx"
    onnx.save(mlp(), model)
    procs = [subprocess.Popen([sys.executable, "-c", script, db_url, str(model), str(Path(__file__).parent),
                               str(t0)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for t0 in (1e6, 2e6)]
    outs = [p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    stats = Database(db_url).stats()
    assert (stats["records"], stats["workloads"], stats["targets"]) == (280, 3, 1)
    assert sum(int(out) for out, _ in outs) == 280


def test_builds_use_each_tasks_best_and_shipped_records_only_where_the_database_has_none(db_url, tmp_path, tasks,
                                                                                         caplog):
    from autosched.database import TunedSchedules, shipped_database
    user = Database(db_url)
    user.commit(measured(tasks[0], HERE, [3e-3, 2e-3]))
    with Database(tmp_path / "ship.db") as ship, open(tmp_path / "zoo.jsonl", "w") as f:
        ship.commit(measured(tasks[0], OTHER_CPU, [1e-4]))  # faster, but the user's own records win
        ship.commit(measured(tasks[1], OTHER_CPU, [5e-4, 4e-4]))
        export_jsonl(ship, f)
    shipped = shipped_database(tmp_path)
    schedules = TunedSchedules(user, shipped)
    with caplog.at_level(logging.WARNING, "autosched.database"):
        for task in tasks:
            schedules(task, HERE)
    assert {k: b.cost for k, b in schedules.used.items()} == {tasks[0].key: 2e-3, tasks[1].key: 4e-4}
    assert schedules.from_fallback == {tasks[1].key} and caplog.text == ""
    other = TunedSchedules(user, shipped)
    for task in tasks:
        other(task, OTHER_ISA)
    assert other.used == {}  # shipped records never cross an ISA either
    assert shipped_database(tmp_path / "nothing-here") is None


def test_records_of_another_cpu_of_the_same_isa_are_used_with_one_notice(db_url, tasks, caplog):
    from autosched.database import TunedSchedules
    db = Database(db_url)
    for task in tasks[:2]:
        db.commit(measured(task, OTHER_CPU, [1e-3]))
    schedules = TunedSchedules(db)
    with caplog.at_level(logging.WARNING, "autosched.database"):
        for task in tasks:
            schedules(task, HERE)
    assert len(schedules.used) == 2
    assert caplog.text.count("records measured on another CPU of the same ISA (Example CPU B") == 1


def test_the_notice_says_what_differs_between_two_cpus_of_one_model(db_url, tasks, caplog):
    """Two instances of one CPU model may expose different extensions: the notice names them,
    not the model twice."""
    from autosched.database import TunedSchedules
    richer = Target.parse("llvm", host=CpuInfo("Example CPU A", AVX512 | {"avx512_vnni"}))
    db = Database(db_url)
    db.commit(measured(tasks[0], richer, [1e-3]))
    with caplog.at_level(logging.WARNING, "autosched.database"):
        TunedSchedules(db)(tasks[0], HERE)
    assert "of the same ISA (Example CPU A with avx512_vnni, unlike this one)" in caplog.text


def test_the_checkout_ships_records_for_both_x86_isa_classes():
    from autosched.database import shipped_database, shipped_dir
    assert shipped_dir() is not None
    shipped = shipped_database()
    assert {s.target.isa for s in shipped.stored()} == {"x86_64-avx512", "x86_64-avx2"}
    assert all(s.result.ok for s in shipped.stored())


def test_an_interrupt_between_a_statement_and_its_rows_leaves_no_write_lock_behind(tmp_path, monkeypatch):
    """Ctrl-C landing after a SELECT inside a write transaction: SQLAlchemy closes the connection,
    which SQLite keeps alive while the statement's cursor lives (kept by the traceback's cycle),
    and with it the write lock. The tuner's writes after the interrupt (claims given back, the
    session closed) then waited out the busy timeout and failed: a Ctrl-C'd tune hung 120 s. The
    interrupt is raised from an event hook, where a signal handler would raise it."""
    from sqlalchemy import event

    from autosched.database import location
    monkeypatch.setattr(location, "BUSY_TIMEOUT_MS", 1000)
    db = Database(tmp_path / "t.db")
    session = db.start_session("m", Target.parse("llvm"), 4)
    armed = [True]

    def interrupt(conn, cursor, statement, *_):
        if armed and statement.startswith("SELECT"):
            armed.clear()
            raise KeyboardInterrupt

    event.listen(db._engine, "after_cursor_execute", interrupt)
    with pytest.raises(KeyboardInterrupt):
        db.end_session(session, "done")  # an UPDATE, then the SELECT of its trials
    assert db.end_session(session, "interrupted") == 0  # inside the interrupt's lifetime, as the tuner does
    assert [s["status"] for s in db.sessions()] == ["interrupted"]
