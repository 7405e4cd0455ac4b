"""Claims on a real SQLite file and a real PostgreSQL database: a config is held by one tuner at
a time, its record's commit gives it back, a dead tuner's claims are taken over (at once where its
process is known dead on this host, else when its lease runs out), a live tuner's heartbeat keeps
them; and tuners sharing a database through `SharedTuning` never measure a config twice and learn
from each other's records."""
import socket
import subprocess
import time

import pytest
from db_helpers import HERE, held, measured

from autosched.database import ClaimBook, Database, Owner, RecordWriter, SharedTuning, latest_record
from autosched.measure import ErrorKind, MeasureInput, NullBuilder, ReplayRunner, measure_with
from autosched.templates import get_template
from autosched.tuner.registry import get_tuner


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def inputs_of(task, indices):
    space = get_template(task.op, HERE.kind).space(task, HERE)
    return [MeasureInput(task, HERE, space.get(i)) for i in indices]


def book(db, host="host-a", pid=101, lease_s=3600.0):
    session = db.start_session("m.onnx", HERE, 10)
    return ClaimBook(db, Owner(session, host, pid), lease_s)


def test_a_config_is_held_once_and_its_record_gives_it_back(db_url, tasks):
    db = Database(db_url)
    a, b = book(db), book(db, "host-b", 202)
    first = inputs_of(tasks[0], [0, 1, 2, 3])
    assert a.claim(first[:3]) == [True, True, True]
    assert b.claim(first[1:]) == [False, False, True]
    assert (b.stats.contended, b.stats.granted) == (2, 1)
    assert a.claim(first[:1]) == [True]  # a tuner's own claim is its own (renewed)
    recs = measured(tasks[0], HERE, [1e-3, None, 2e-3])
    RecordWriter(db, a.owner.session)([i for i, _ in recs], [r for _, r in recs])
    assert len(held(db)) == 1 and held(db)[0]["session_id"] == b.owner.session  # config 3 only
    assert db.stats()["claims"] == 1  # `db stats` counts the claims held now
    assert b.claim(first[:3]) == [False, False, False]  # they have records now (a failure is a record too)
    assert b.stats.measured == 3 and len(held(db)) == 1
    assert b.release() == 1 and held(db) == []


def test_an_expired_claim_is_taken_over_and_a_live_one_is_not(db_url, tasks):
    db = Database(db_url)
    a, b = book(db, lease_s=2.0), book(db, "host-b", 202)  # 0.5 s had run out under a loaded CI
    (inp,) = inputs_of(tasks[0], [5])
    assert a.claim([inp]) == [True]
    assert b.claim([inp]) == [False]  # another host: only its lease says whether it lives
    time.sleep(2.1)
    assert b.claim([inp]) == [True] and b.stats.reclaimed == 1
    assert a.claim([inp]) == [False]  # the late owner does not get it back
    [claim] = held(db)
    assert (claim["session_id"], claim["host"], claim["pid"]) == (b.owner.session, "host-b", 202)


def test_a_dead_process_on_this_host_loses_its_claims_at_once(db_url, tasks):
    db = Database(db_url)
    host = socket.gethostname()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        dead, live = book(db, host, dead_pid()), book(db, host, alive.pid)
        me = book(db, host, pid=alive.pid + 1_000_000)  # a pid that cannot exist: never "this process"
        first, second = inputs_of(tasks[0], [7, 8])
        assert dead.claim([first]) == [True] and live.claim([second]) == [True]
        assert me.claim([first, second]) == [True, False]
        assert me.stats.reclaimed == 1 and me.stats.contended == 1
    finally:
        alive.kill()
        alive.wait()


def test_a_resumed_tuner_finds_what_dead_tuners_left_claimed(db_url, tasks):
    db = Database(db_url)
    space = get_template(tasks[0].op, HERE.kind).space(tasks[0], HERE)
    dead = book(db, socket.gethostname(), dead_pid())
    assert dead.claim(inputs_of(tasks[0], [3, 9])) == [True, True]
    other_host = book(db, "host-b", 202)  # alive as far as anyone here can tell
    assert other_host.claim(inputs_of(tasks[0], [4])) == [True]
    me = book(db, socket.gethostname(), dead_pid() + 1_000_000)
    assert sorted(me.abandoned(tasks[0].key, space, HERE)) == [3, 9]
    assert me.abandoned(tasks[1].key, get_template(tasks[1].op, HERE.kind).space(tasks[1], HERE), HERE) == []


def test_the_heartbeat_keeps_a_live_tuners_claims_and_closing_gives_them_back(db_url, tasks):
    db = Database(db_url)
    a, b = book(db, lease_s=0.6).start(), book(db, "host-b", 202)
    (inp,) = inputs_of(tasks[0], [11])
    assert a.claim([inp]) == [True]
    time.sleep(1.5)  # two and a half leases: only renewals keep it
    assert b.claim([inp]) == [False] and b.stats.contended == 1
    a.close()
    assert held(db) == []
    assert b.claim([inp]) == [True]


def replay_table(space):
    """A cost for every config: no two alike, a few failures."""
    return {i: ErrorKind.COMPILE_ERROR if i % 11 == 0 else 1e-3 * (1 + (i * 7919 % 1000) / 1000)
            for i in range(space.size)}


@pytest.mark.parametrize("tuner", ["random", "xgb"])
def test_tuners_sharing_a_database_measure_each_config_once_and_learn_from_each_other(db_url, tasks, tuner):
    """Two tuners of one task with the same seed (they propose the same configs), taking turns:
    every config is measured by one of them, and each learns the other's results."""
    db = Database(db_url)
    task = tasks[0]
    space = get_template(task.op, HERE.kind).space(task, HERE)
    measure = measure_with(NullBuilder(), ReplayRunner(replay_table(space)))
    since = latest_record(db)
    tuners, writers, shares = [], [], []
    for _ in range(2):
        session = db.start_session("m.onnx", HERE, 48)
        shares.append(SharedTuning(db, session, since).__enter__())
        t = get_tuner(tuner)(task, space, HERE, seed=0, plan_size=8) if tuner == "xgb" else \
            get_tuner(tuner)(task, space, HERE, seed=0)
        t.share_with(shares[-1])
        tuners.append(t)
        writers.append(RecordWriter(db, session, tuner))
    measured_by = [[], []]
    for _ in range(6):
        for k in (0, 1):
            inputs = tuners[k].ask(8)
            results = measure(inputs)
            tuners[k].tell(inputs, results)
            writers[k](inputs, results)
            measured_by[k] += [i.config.index for i in inputs]
    for share in shares:
        share.__exit__(None, None, None)
    both = measured_by[0] + measured_by[1]
    assert len(both) == len(set(both)) == 96
    assert shares[1].stats.contended + shares[1].stats.measured > 0  # the same seed: they did collide
    assert set(measured_by[1][:-8]) <= tuners[0]._learned  # each learned what the other measured before
    assert set(measured_by[0]) <= tuners[1]._learned
    assert db.stats()["records"] == 96 and held(db) == []


def test_a_failed_measurement_gives_its_claims_back(db_url, tasks):
    """A batch that raises (not a failed result: an exception) leaves nothing claimed once the
    session's share is closed, so the next tuner measures those configs."""
    db = Database(db_url)
    task = tasks[0]
    space = get_template(task.op, HERE.kind).space(task, HERE)
    session = db.start_session("m.onnx", HERE, 8)
    with pytest.raises(RuntimeError), SharedTuning(db, session, 0) as share:
        t = get_tuner("random")(task, space, HERE, seed=0)
        t.share_with(share)
        assert len(t.ask(4)) == 4 and len(held(db)) == 4
        raise RuntimeError("the runner died")
    assert held(db) == []
