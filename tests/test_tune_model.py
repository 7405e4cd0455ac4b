"""Tuning a whole model: the task scheduler, the tuning database, builds that use its best configs."""
import json
import logging
import os
import re
import sqlite3

import numpy as np
import onnx
import pytest
from db_helpers import execute
from onnx import TensorProto, helper, numpy_helper
from task_helpers import PerTaskCost, PipelinedPerTaskCost, assert_matches_reference

from autosched.cli import main
from autosched.compile.model import build_model
from autosched.database import Database, RecordWriter, TunedSchedules, history, import_jsonl
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.measure.caches import llc_bytes, model_caches
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.task_scheduler import tune_tasks
from autosched.tuner.base import TunerError
from autosched.tuner.callbacks import JsonLinesLog


def test_scheduler_spends_the_budget_in_rounds_and_commits_everything(small_model, tmp_path):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    db = Database(tmp_path / "tune.db")
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        summary = tune_tasks(tasks, "llvm", 12, LocalBuilder(n_parallel=2), runner, tuner="random", round_trials=4,
                             callbacks=[RecordWriter(db)])
    assert summary.trials == 12
    assert [p.task.op for p in summary.progress] == ["Gemm", "Gemm"]
    assert summary.progress[0].task.flops > summary.progress[1].task.flops  # biggest share first
    assert all(p.trials >= 4 for p in summary.progress)  # every task had its first round
    # 12 trials and the third round's task's default re-timed beside it (the first rounds held it)
    assert db.stats()["records"] == 13

    schedules = TunedSchedules(db)
    files = build_model(load_onnx(small_model), tmp_path / "tuned.so", Target.parse("llvm"), schedules)
    assert sorted({*schedules.used, *schedules.declined}) == sorted(p.task.key for p in summary.progress)
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    model = load_model(files.library)
    got = model.run({"x": x})["y"]
    model.close()
    import onnxruntime as ort
    want = ort.InferenceSession(str(small_model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_each_round_retimes_its_tasks_default_beside_it_and_records_it_apart(small_model, tmp_path):
    """Rounds after a task's first (which measures its default as a trial) time the default once
    more, in the same batch; those timings are recorded under the tuner "reference", are not
    trials of the session, and the default's fastest of them is what tuned configs are weighed
    against (`config_cost`)."""
    from autosched.database.queries import config_cost
    from autosched.database.writer import REFERENCE_TUNER
    from autosched.templates import get_template

    (task, *_) = sorted(extract_tasks(optimize(load_onnx(small_model))).tasks, key=lambda t: -t.flops)
    target = Target.parse("llvm")
    db = Database(tmp_path / "ref.db")
    session = db.start_session("small", target, 12)
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        summary = tune_tasks([task], target, 12, LocalBuilder(n_parallel=2), runner, tuner="random",
                             round_trials=4, callbacks=[RecordWriter(db, session, "random")])
    assert summary.trials == 12
    default = get_template(task.op, "llvm").fallback(task, target)
    rows = execute(tmp_path / "ref.db", "SELECT config, cost, tuner FROM records")
    retimed = [cost for config, cost, tuner in rows if tuner == REFERENCE_TUNER]
    assert len(retimed) == 2 and len(rows) == 14  # rounds 2 and 3
    default_costs = [cost for config, cost, _ in rows if json.loads(config)["index"] == default.index]
    assert len(default_costs) == 3 and all(c is not None for c in default_costs)
    assert config_cost(db, task, target, default) == min(default_costs)
    (row,) = [s for s in db.sessions() if s["id"] == session]
    assert row["trials_done"] == 12


def test_cli_tune_then_build_from_the_database(small_model, db_url, tmp_path, capsys):
    db = db_url
    assert main(["tune", str(small_model), "--trials", "6", "--round", "3", "--tuner", "random",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"database: {db}" in out and f"6 trials committed to {db}" in out
    assert main(["check", str(small_model), "--db", str(db)]) == 0
    assert main(["build", str(small_model), "--db", str(db), "-o", str(tmp_path / "m.so")]) == 0
    assert _from_database(capsys.readouterr().out) == (2, 2)
    assert main(["build", str(small_model), "--db", str(db), "-o", "/proc/missing/m.so"]) == 2
    assert "error: /proc/missing/m.so: cannot write the built model" in capsys.readouterr().err

    # the same records, as if measured for another ISA: never applied, and said once
    other = "x86_64-avx2" if Target.parse("llvm").isa != "x86_64-avx2" else "x86_64-avx512"
    exported, foreign = tmp_path / "all.jsonl", tmp_path / "foreign.db"
    assert main(["db", "export", "-o", str(exported), "--db", str(db)]) == 0
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    exported.write_text("".join(json.dumps({**r, "isa": other, "fingerprint": f"{other}|elsewhere"}) + "\n"
                                for r in lines))
    assert main(["db", "import", str(exported), "--db", str(foreign)]) == 0
    capsys.readouterr()
    assert main(["build", str(small_model), "--db", str(foreign), "-o", str(tmp_path / "f.so")]) == 0
    out, err = capsys.readouterr()
    assert "0 of 2 tasks with tuned schedules" in out
    assert err.count("note:") == 1 and f"2 tasks have records only for {other}" in err


def test_tune_times_kernels_in_the_cache_mode_the_model_runs_them_in_and_records_say_so(small_model, tmp_path,
                                                                                         capsys):
    def timed(db):
        return set(execute(str(db), "SELECT caches, threads FROM records WHERE cost IS NOT NULL"))

    threads = os.cpu_count() or 1
    cold, auto = tmp_path / "cold.db", tmp_path / "auto.db"
    common = ["--trials", "4", "--round", "2", "--tuner", "random", "--no-model-check"]
    assert main(["tune", str(small_model), *common, "--db", str(cold), "--caches", "cold"]) == 0
    out = capsys.readouterr().out
    assert "timing kernels in cold caches (the model's weights: 15 KiB)" in out, repr(out)
    assert timed(cold) == {("cold", threads)}
    assert main(["db", "best", str(small_model), "--db", str(cold)]) == 0
    assert capsys.readouterr().out.count("(timed in cold caches)") == 2
    assert main(["tune", str(small_model), *common, "--db", str(auto), "--caches", "auto"]) == 0  # weights fit
    assert "timing kernels in" not in capsys.readouterr().out and timed(auto) == {("warm", threads)}
    assert model_caches("auto", 2 * llc_bytes()) == "cold" and model_caches("auto", 1 << 20) == "warm"
    assert main(["tune", str(small_model), *common, "--db", str(auto), "--target", "cuda", "--emulate",
                 "--caches", "cold"]) == 2
    assert "the CUDA emulation times nothing" in capsys.readouterr().err


def _from_database(build_output: str) -> tuple[int, int]:
    """(tasks a build took from the database, tasks): those with a tuned schedule plus those whose
    best config the noise rule or the model's verdict left on their default."""
    found = re.search(r"(\d+) of (\d+) tasks with tuned schedules(?:; (\d+) on their default)?", build_output)
    assert found, build_output
    return int(found[1]) + int(found[3] or 0), int(found[2])


def test_bad_imports_are_named_and_foreign_configs_skipped_with_a_warning(small_model, tmp_path, capsys, caplog):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "k", "target": "llvm"}\n')
    db = tmp_path / "t.db"
    assert main(["db", "import", str(bad), "--db", str(db)]) == 2
    assert f"error: 0 imported: {bad}:1: not a measurement record" in capsys.readouterr().err
    assert main(["db", "import", str(tmp_path / "missing.jsonl"), "--db", str(db)]) == 2
    assert "missing.jsonl: cannot read" in capsys.readouterr().err

    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    forged = tmp_path / "forged.jsonl"
    record = {"task": tasks[0].key, "target": "llvm", "costs": [1e-3], "error_kind": "NO_ERROR", "error_msg": "",
              "build_s": 0.1, "timestamp": 0.0, "config": {"template": "elsewhere", "space": "0", "index": 0, "knobs": {}}}
    forged.write_text(json.dumps(record) + "\n")
    with Database(db) as database, caplog.at_level(logging.WARNING, "autosched.database"):
        assert import_jsonl(database, forged) == (1, 1)
        schedules = TunedSchedules(database)
        build_model(load_onnx(small_model), tmp_path / "f.so", "llvm", schedules)
    assert schedules.used == {}  # the forged config is in another space version: never built
    assert "1 records of task Gemm 8x64 skipped: measured in another space version" in caplog.text


# 11 s each; on SQLite a long case: tune_faults' kill -9 and resume covers resuming from a file
@pytest.mark.parametrize("dialect", [pytest.param("sqlite", marks=pytest.mark.slow), "postgres"], indirect=True)
def test_cli_tune_resumes_from_the_database_without_measuring_a_config_twice(small_model, db_url, capsys):
    db = db_url
    for _ in range(2):
        assert main(["tune", str(small_model), "--trials", "8", "--round", "4", "--tuner", "xgb",
                     "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "resuming from 8 records of 2 tasks" in out
    pairs = execute(db, "SELECT workload_id, target_id, config FROM records WHERE tuner != 'reference'")
    assert len(pairs) == 16 and len(set(pairs)) == 16
    # the second run's rounds re-timed each task's default beside them (the first run's held it)
    assert len(execute(db, "SELECT id FROM records WHERE tuner = 'reference'")) == 2
    with Database(db) as database:  # the XGBoost tuners' fits and proposals, for the report
        assert all(s["search_s"] > 0 for s in database.sessions())


def test_history_feeds_each_tuner_its_records_and_model_based_ones_the_others(small_model, tmp_path):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    log = tmp_path / "first.jsonl"
    db = Database(tmp_path / "first.db")
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        tune_tasks(tasks, "llvm", 8, LocalBuilder(n_parallel=2), runner, tuner="random", round_trials=4,
                   callbacks=[JsonLinesLog(log), RecordWriter(db)])
        target = Target.parse("llvm")
        found = history(db, tasks, target)
        assert sorted(map(len, found.values())) == [4, 4]
        assert history(db, tasks, Target.parse("cuda -arch=sm_90")) == {}  # other targets' records are not this run's
        big = max(tasks, key=lambda t: t.flops)
        only_big = {big.key: found[big.key]}
        resumed = tune_tasks(tasks, target, 8, LocalBuilder(n_parallel=2), runner, tuner="xgb", round_trials=4,
                             callbacks=[JsonLinesLog(log)], history=only_big)
    first_best = min(res.cost for _, res in found[big.key] if res.ok)
    progress = {p.task.key: p for p in resumed.progress}
    assert progress[big.key].best_cost <= first_best  # the logged best counts from the start
    small_key = next(k for k in progress if k != big.key)
    # only the task without a logged best gets a first round; the resumed one is chosen by time
    assert [json.loads(line)["task"] for line in log.read_text().splitlines()[8:12]] == [small_key] * 4
    small = progress[small_key].tuner
    assert small._transfer and {inp.task.key for inp, _ in small._transfer} == {big.key}
    pairs = [(r["task"], r["config"]["index"]) for r in map(json.loads, log.read_text().splitlines())]
    big_pairs = [p for p in pairs if p[0] == big.key]
    # nothing of the big task's history measured again (the small task was given none: its fresh
    # first round may draw a config its first run drew)
    assert len(pairs) == 16 and len(set(big_pairs)) == len(big_pairs) == 8


def test_history_skips_a_config_outside_the_tasks_space_naming_it(small_model, tmp_path, caplog):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    db = Database(tmp_path / "tampered.db")
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        tune_tasks(tasks[:1], "llvm", 2, LocalBuilder(n_parallel=2), runner, tuner="random",
                   callbacks=[RecordWriter(db)])
    with sqlite3.connect(tmp_path / "tampered.db") as conn:
        (config,) = conn.execute("SELECT config FROM records WHERE id = 2").fetchone()
        config = json.loads(config)
        config["knobs"]["mr"] = 5  # not one of the space's values
        conn.execute("UPDATE records SET config = ? WHERE id = 2", (json.dumps(config),))
    with caplog.at_level(logging.WARNING, "autosched.database"):
        assert len(history(db, tasks, Target.parse("llvm"))[tasks[0].key]) == 1
    assert "record 2 (Gemm 8x64) skipped" in caplog.text and "mr" in caplog.text


def test_each_task_is_first_measured_at_its_untuned_config(tmp_path):
    """So a tuned build is never slower than the untuned one: the conv's first trial is the
    template's fallback config, which the untuned build uses, and its kernel gives numpy's answer."""
    from autosched.templates import get_template
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 8, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 10, 10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 10])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    (task,) = extract_tasks(optimize(load_onnx(path))).tasks
    log = tmp_path / "conv.jsonl"
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        tune_tasks([task], "llvm", 3, LocalBuilder(n_parallel=2), runner, tuner="random", callbacks=[JsonLinesLog(log)])
    first = json.loads(log.read_text().splitlines()[0])
    template, target = get_template("Conv", "llvm"), Target.parse("llvm")
    fallback = template.fallback(task, target)
    assert first["config"]["index"] == fallback.index
    assert_matches_reference(task, *template.apply(task, fallback, target), target)


def test_a_pipelined_runner_gets_the_next_round_before_the_current_one_is_waited_for(small_model, tmp_path):
    """Every round but the first is submitted before the driver waits for the one before it;
    the budget is spent exactly, no config twice, every trial and each round's search time
    reach the database."""
    from autosched.measure import NullBuilder
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    runner = PipelinedPerTaskCost({t.key: 1e-3 for t in tasks})
    records: list[tuple[str, int]] = []
    with Database(tmp_path / "t.db") as database:
        session = database.start_session("small", Target.parse("llvm"), 20)
        writer = RecordWriter(database, session, "xgb")
        summary = tune_tasks(tasks, "llvm", 20, NullBuilder(), runner, tuner="xgb", round_trials=4,
                             callbacks=[writer, lambda inputs, _: records.extend((i.task.key, i.config.index)
                                                                                for i in inputs)])
        searched = database.sessions()[0]["search_s"]
    assert summary.trials == writer.written == len(records) == len(set(records)) == 20 and searched > 0
    submitted = [t for what, t in runner.log if what == "submit"]
    waited = [t for what, t in runner.log if what == "wait"]
    assert waited == submitted and len(submitted) == 5
    assert all(runner.log.index(("submit", b)) < runner.log.index(("wait", a)) for a, b in zip(submitted, submitted[1:]))


def test_a_task_that_stops_improving_yields_rounds_to_the_others(small_model):
    from autosched.measure import NullBuilder
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    big, small = sorted(tasks, key=lambda t: -t.flops)
    runner = PerTaskCost({big.key: 10e-3, small.key: 1e-3})
    summary = tune_tasks(tasks, "llvm", 4 * 14, NullBuilder(), runner, tuner="random", round_trials=4,
                         scheduler="costliest")
    trials = {p.task.key: p.trials for p in summary.progress}
    # the big task costs 10x more but its rounds stopped paying: after 10 stale rounds the
    # small one is chosen again (weight × time alone would give the big one every round)
    assert trials[small.key] > 4 and trials[big.key] > trials[small.key]
    assert {p.task.key: p.stale_rounds for p in summary.progress}[big.key] >= 10


def test_zoo_mlp_tunes_builds_and_checks_through_the_cli(tmp_path, capsys):
    """The README's workflow on the zoo's MLP: tune a little, then build and check from the database."""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-m", "autosched.zoo", str(tmp_path)], check=True, capture_output=True)
    model, db = tmp_path / "mlp.onnx", tmp_path / "t.db"
    assert main(["tune", str(model), "--trials", "6", "--round", "2", "--tuner", "random", "--db", str(db)]) == 0
    assert "6 trials committed" in capsys.readouterr().out
    assert main(["build", str(model), "--db", str(db), "-o", str(tmp_path / "mlp.so")]) == 0
    assert _from_database(capsys.readouterr().out) == (3, 3)
    assert main(["check", str(model), "--db", str(db)]) == 0


def test_gradient_priority_favours_recent_gains_and_large_shares_not_low_throughput(small_model):
    from autosched.task_scheduler import TaskProgress, gradient_priority
    big, small = sorted(extract_tasks(optimize(load_onnx(small_model))).tasks, key=lambda t: -t.flops)
    # same task, same best and trials: the one whose last round gained ranks higher
    stuck = TaskProgress(big, None, trials=32, best_cost=1e-3, previous_cost=1e-3, last_round=16)
    gaining = TaskProgress(big, None, trials=32, best_cost=1e-3, previous_cost=2e-3, last_round=16)
    assert gradient_priority(gaining, [gaining]) > gradient_priority(stuck, [stuck])
    # a task at a tenth of the throughput another task of its op reached is not thereby the one to
    # tune (Ansor's gap term): at equal trials the larger share of the model's time ranks first
    fast = TaskProgress(big, None, trials=64, best_cost=20 * big.flops / 100e9 / big.weight)
    slow = TaskProgress(small, None, trials=64, best_cost=small.flops / 10e9 / small.weight)
    assert fast.model_seconds > slow.model_seconds
    assert gradient_priority(slow, [fast, slow]) == gradient_priority(slow, [slow]) < gradient_priority(fast, [fast, slow])
    # and a task with few trials for its share gets the next round before one tuned at length
    assert gradient_priority(TaskProgress(big, None, trials=16, best_cost=1e-3), []) > \
        gradient_priority(TaskProgress(big, None, trials=256, best_cost=1e-3), [])
    assert gradient_priority(TaskProgress(small, None), [fast]) == float("inf")  # no best yet: first


def test_gradient_scheduler_spends_the_budget_and_unknown_schedulers_are_refused(small_model):
    from autosched.measure import NullBuilder
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    big, small = sorted(tasks, key=lambda t: -t.flops)
    runner = PerTaskCost({big.key: 10e-3, small.key: 1e-3})
    summary = tune_tasks(tasks, "llvm", 4 * 6, NullBuilder(), runner, tuner="random", round_trials=4,
                         scheduler="gradient")
    assert summary.trials == 24 and all(p.trials >= 4 for p in summary.progress)
    with pytest.raises(TunerError, match="unknown scheduler 'fastest'"):
        tune_tasks(tasks, "llvm", 4, NullBuilder(), runner, scheduler="fastest")
