"""Three `autosched tune` processes at once on one database (an SQLite file, and a database of a
real PostgreSQL server): two of the same model, a third of a model that shares one of its tasks.
They build with gcc and time on this machine as a user's tunes do. Claims make every config
measured once: no duplicate (task, target, config), no record lost; and after a kill -9 of one
of them and its resume, the configs it held when it died are measured by the resumed run."""
import uuid

import pytest
from process_helpers import start_tune, wait_for
from sqlalchemy import text

from autosched.api import model_tasks
from autosched.database import Database


def query(db_url, sql, **params):
    with Database(db_url, read_only=True) as db, db.reading() as conn:
        return [tuple(row) for row in conn.execute(text(sql), params).all()]


#: trial records: not the defaults re-timed beside rounds (`task_scheduler.with_reference`)
TRIALS = "WHERE coalesce(tuner, '') != 'reference'"


def duplicates(db_url):
    return query(db_url, f"SELECT workload_id, target_id, config, count(*) FROM records {TRIALS} "
                         "GROUP BY workload_id, target_id, config HAVING count(*) > 1")


def finish(procs):
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]


def check_all_kept(db_url, trials_per_session):
    """Every session did what it was asked and committed all of it; nothing measured twice;
    nothing left claimed."""
    assert duplicates(db_url) == []
    sessions = query(db_url, "SELECT id, status, trials_done FROM sessions ORDER BY id")
    assert [(status, done) for _, status, done in sessions] == [("done", trials_per_session)] * len(sessions)
    assert query(db_url, f"SELECT count(*) FROM records {TRIALS}") == [(trials_per_session * len(sessions),)]
    assert query(db_url, "SELECT count(*) FROM claims") == [(0,)]


def three_tuners(small_model, other_model, db_url, trials):
    """The same seed and tuner for the two of one model: unclaimed, they would measure the same configs."""
    return [start_tune(model, db_url, trials, uuid.uuid4().hex) for model in (small_model, small_model, other_model)]


# 16 s each; on PostgreSQL a long case: the default suite's tuners sharing a server are
# test_claims.py's and the kill -9 and resume below
@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True)
def test_three_tuners_on_one_database_measure_no_config_twice(small_model, other_model, db_url):
    finish(three_tuners(small_model, other_model, db_url, 12))
    check_all_kept(db_url, 12)


@pytest.mark.slow
def test_three_tuners_of_100_trials_measure_no_config_twice(small_model, other_model, db_url):
    finish(three_tuners(small_model, other_model, db_url, 100))
    check_all_kept(db_url, 100)


# 25 s each; on SQLite a long case: the default suite's kill -9 and resume on a file is test_tune_faults.py's
@pytest.mark.parametrize("dialect", [pytest.param("sqlite", marks=pytest.mark.slow), "postgres"], indirect=True)
def test_a_tuner_killed_and_resumed_measures_what_it_held_and_nothing_twice(small_model, other_model, db_url):
    """The killed tuner is the one of the other model, killed while it holds claims on the task only
    its model has: the resumed run measures those (same host, its pid gone: taken over at once).
    Whatever it held of the shared task, some live tuner measures."""
    trials = 16
    procs = three_tuners(small_model, other_model, db_url, trials)
    victim = procs[2]
    _, small_tasks = model_tasks(small_model)
    _, other_tasks = model_tasks(other_model)
    (own,) = {t.key for t in other_tasks} - {t.key for t in small_tasks}
    held = "SELECT c.session_id, c.workload_id, c.target_id, c.config, w.key FROM claims c " \
           "JOIN workloads w ON w.id = c.workload_id WHERE c.pid = :pid"

    wait_for(lambda: victim.poll() is not None or any(k == own for *_, k in query(db_url, held, pid=victim.pid)),
             limit=300)
    victim.kill()  # kill -9: nothing given back
    victim.wait()
    left = query(db_url, held, pid=victim.pid)
    assert any(k == own for *_, k in left), "the tuner was killed holding claims on its own task"
    killed = left[0][0]
    resumed = start_tune(other_model, db_url, trials, uuid.uuid4().hex)
    finish([*procs[:2], resumed])
    assert duplicates(db_url) == []
    assert query(db_url, "SELECT count(*) FROM claims") == [(0,)]
    (session,) = query(db_url, "SELECT max(id) FROM sessions")[0]
    by_session = {}
    for s, *key in query(db_url, f"SELECT session_id, workload_id, target_id, config FROM records {TRIALS}"):
        by_session.setdefault(s, set()).add(tuple(key))
    measured = set().union(*(keys for s, keys in by_session.items() if s != killed))
    assert {tuple(c[1:4]) for c in left} <= measured
    assert {tuple(c[1:4]) for c in left if c[4] == own} <= by_session[session]
    sessions = {i: (status, done) for i, status, done in query(db_url, "SELECT id, status, trials_done FROM sessions")}
    assert sessions.pop(killed)[0] == "running"  # it never closed
    assert sorted(sessions.values()) == [("done", trials)] * 3
    assert query(db_url, f"SELECT count(*) FROM records {TRIALS}") == [(sum(map(len, by_session.values())),)]
    assert sum(map(len, by_session.values())) == 3 * trials + len(by_session.get(killed, ()))
