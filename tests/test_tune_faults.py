"""Tuning runs that end badly: Ctrl-C, kill -9, two tuners on one file. Real processes, real
gcc builds, a real SQLite file; the model is test_tune_model's two small Gemms."""
import os
import signal
import sqlite3
import uuid

import pytest
from process_helpers import finish, marked, records, start_tune, wait_for

import autosched
from autosched.database import Database, best
from autosched.database.verdicts import winners
from autosched.target import Target


def measured(db, tuner: str = "trials"):
    """(workload, target, config) of each trial record, or of each default re-timed beside a
    round (`tuner="reference"`)."""
    where = "= 'reference'" if tuner == "reference" else "!= 'reference'"
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT workload_id, target_id, config FROM records WHERE coalesce(tuner, '') {where}").fetchall()


@pytest.mark.parametrize("after", [0, 2])
def test_ctrl_c_keeps_what_was_measured_says_how_to_resume_and_leaves_no_process(small_model, tmp_path,
                                                                                 after):
    db, mark = tmp_path / "t.db", uuid.uuid4().hex
    proc = start_tune(small_model, db, 400, mark)
    wait_for(lambda: records(db) >= after and len(marked(mark)) > 1 or proc.poll() is not None)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    out, err = finish(proc, 120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    [line] = err.splitlines()
    kept = records(db)
    assert line == (f"interrupted: {kept} records kept in {db}; run the same command again to resume "
                    "(nothing measured is measured again)")
    wait_for(lambda: not marked(mark))
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, trials_done FROM sessions").fetchall() == [("interrupted", kept)]


def test_kill_9_leaves_no_process_and_a_resumed_tune_loses_nothing_and_repeats_nothing(small_model,
                                                                                       tmp_path):
    db, mark = tmp_path / "t.db", uuid.uuid4().hex
    proc = start_tune(small_model, db, 400, mark)
    # kill it while its builders live: the builder pool exists only while a batch builds, so wait
    # for a moment when the tuner, its builders and its measurement worker are all there
    wait_for(lambda: records(db) >= 6 and len(marked(mark)) >= 3)
    proc.kill()
    proc.communicate()
    wait_for(lambda: not marked(mark))  # every child died with its tuner
    kept, retimed = measured(db), measured(db, "reference")
    again = start_tune(small_model, db, 8, uuid.uuid4().hex)
    out, err = finish(again, 300)
    assert again.returncode == 0, err
    assert f"resuming from {len(kept) + len(retimed)} records" in out
    after = measured(db)
    assert set(kept) <= set(after) and len(after) == len(kept) + 8
    assert len(set(after)) == len(after)  # no (workload, target, config) measured twice as a trial
    assert set(measured(db, "reference")) <= set(after)  # re-timings are of measured defaults only


@pytest.mark.slow  # 19 s; the default suite's three tuners on one SQLite file (test_claims_tuners.py) cover it
def test_two_tuners_share_one_database_file(small_model, tmp_path):
    db = tmp_path / "shared.db"
    procs = [start_tune(small_model, db, 8, uuid.uuid4().hex, "--seed", str(seed)) for seed in (1, 2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in results]
    assert records(db) == 16
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, trials_done FROM sessions").fetchall() == [("done", 8)] * 2


def test_python_api_tunes_then_builds_each_task_from_its_best_record(small_model, tmp_path):
    db = tmp_path / "api.db"
    out = autosched.tune(small_model, "llvm", 8, db=db, tuner="random", round_trials=4)
    assert out.summary.trials == 8 and out.resumed == 0
    built = autosched.build(small_model, "llvm", db=db, output=tmp_path / "m.so")
    assert built.files.library.exists() and built.tuned + len(built.declined) == built.tasks == 2
    target = Target.parse("llvm")
    with Database(db) as database, sqlite3.connect(db) as conn:
        for key, used in built.used.items():
            task = next(p.task for p in out.summary.progress if p.task.key == key)
            fastest = conn.execute("SELECT r.id FROM records r JOIN workloads w ON r.workload_id = w.id "
                                   "WHERE w.key = ? AND r.cost IS NOT NULL ORDER BY r.cost LIMIT 1", (key,)).fetchone()
            if key in built.superseded:
                # the tune's model check found its fastest no win in the model (timings of half a
                # microsecond, on a busy machine): the fastest config it did judge a win is built
                assert built.superseded[key].record == fastest[0] != used.record
                assert best(database, task, target, among=winners(database, task, target)) == used
            else:
                assert used.record == fastest[0]
                assert best(database, task, target) == used


def test_an_interrupt_before_anything_is_measured_says_so_and_records_the_session(small_model, tmp_path,
                                                                                monkeypatch):
    """Ctrl-C while the tune still prepares the graph (substitution search, task extraction): the
    same line as later interrupts (nothing kept yet) and an interrupted session, no traceback."""
    from autosched import api

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "model_tasks", interrupted)
    db = tmp_path / "t.db"
    with pytest.raises(api.TuneInterrupted) as exc:
        api.tune(small_model, "llvm", 8, db=db, model_check=False)
    assert exc.value.kept == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status, trials_done FROM sessions").fetchall() == [("interrupted", 0)]
