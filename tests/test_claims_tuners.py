"""Three `autosched tune` processes at once on one database (an SQLite file, and a database of a
real PostgreSQL server): two of the same model, a third of a model that shares one of its tasks.
They build with gcc and time on this machine as a user's tunes do. Claims make every config
measured once: no duplicate (task, target, config), no record lost; and after a kill -9 of one
of them and its resume, the configs it held when it died are measured by the resumed run."""
import uuid

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from process_helpers import start_tune, wait_for
from sqlalchemy import text

from autosched.database import Database


@pytest.fixture(scope="module")
def other_model(tmp_path_factory):
    """The small model's first Gemm (the same task) and a wider second one (another task)."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((48, 32)).astype(np.float32), "w2")
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "other", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("other") / "other.onnx"
    onnx.save(model, path)
    return path


def query(db_url, sql, **params):
    with Database(db_url, read_only=True) as db, db.reading() as conn:
        return [tuple(row) for row in conn.execute(text(sql), params).all()]


def duplicates(db_url):
    return query(db_url, "SELECT workload_id, target_id, config, count(*) FROM records "
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
    assert query(db_url, "SELECT count(*) FROM records") == [(trials_per_session * len(sessions),)]
    assert query(db_url, "SELECT count(*) FROM claims") == [(0,)]


def three_tuners(small_model, other_model, db_url, trials):
    """The same seed and tuner for the two of one model: unclaimed, they would measure the same configs."""
    return [start_tune(model, db_url, trials, uuid.uuid4().hex) for model in (small_model, small_model, other_model)]


def test_three_tuners_on_one_database_measure_no_config_twice(small_model, other_model, db_url):
    finish(three_tuners(small_model, other_model, db_url, 12))
    check_all_kept(db_url, 12)


@pytest.mark.slow
def test_three_tuners_of_100_trials_measure_no_config_twice(small_model, other_model, db_url):
    finish(three_tuners(small_model, other_model, db_url, 100))
    check_all_kept(db_url, 100)


def test_a_tuner_killed_and_resumed_measures_what_it_held_and_nothing_twice(small_model, other_model, db_url):
    trials = 24
    procs = three_tuners(small_model, other_model, db_url, trials)
    victim = procs[0]

    def holding():
        return query(db_url, "SELECT count(*) FROM claims WHERE pid = :pid", pid=victim.pid)[0][0]

    wait_for(lambda: victim.poll() is not None or (query(db_url, "SELECT count(*) FROM records")[0][0] >= 8
                                                   and holding() > 0), limit=300)
    victim.kill()  # kill -9: nothing given back
    victim.wait()
    left = query(db_url, "SELECT session_id, workload_id, target_id, config FROM claims WHERE pid = :pid",
                 pid=victim.pid)
    assert left, "the tuner was killed holding claims"
    killed = left[0][0]
    resumed = start_tune(small_model, db_url, trials, uuid.uuid4().hex)
    finish([*procs[1:], resumed])
    assert duplicates(db_url) == []
    assert query(db_url, "SELECT count(*) FROM claims") == [(0,)]
    (session,) = query(db_url, "SELECT max(id) FROM sessions")[0]
    by_resumed = set(query(db_url, "SELECT workload_id, target_id, config FROM records WHERE session_id = :s",
                           s=session))
    assert {key for _, *key in left} <= by_resumed  # reclaimed at once (same host, its pid gone) and measured
    sessions = dict((i, (status, done)) for i, status, done in query(db_url, "SELECT id, status, trials_done FROM sessions"))
    assert sessions.pop(killed)[0] == "running"  # it never closed
    assert sorted(sessions.values()) == [("done", trials)] * 3
    assert query(db_url, "SELECT count(*) FROM records") == [(sum(done for _, done in sessions.values())
                                                              + query(db_url, "SELECT trials_done FROM sessions "
                                                                              "WHERE id = :s", s=killed)[0][0],)]
