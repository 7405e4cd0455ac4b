"""Tuning a whole model: the task scheduler, the tuning log, builds that use the log's best configs."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched.build import build_model
from autosched.cli import main
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.history import LogError, TunedSchedules, best_records, load_history
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.task_scheduler import tune_tasks
from autosched.tuner.callbacks import JsonLinesLog


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """Two Gemms of different size (the larger gets tuned first) and a Relu between them."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((48, 16)).astype(np.float32), "w2")
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("model") / "small.onnx"
    onnx.save(model, path)
    return path


def test_scheduler_spends_the_budget_in_rounds_and_logs_everything(small_model, tmp_path):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    log = tmp_path / "tune.jsonl"
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        summary = tune_tasks(tasks, "llvm", 12, LocalBuilder(n_parallel=2), runner, tuner="random", round_trials=4,
                             callbacks=[JsonLinesLog(log)])
    assert summary.trials == 12
    assert [p.task.op for p in summary.progress] == ["Gemm", "Gemm"]
    assert summary.progress[0].task.flops > summary.progress[1].task.flops  # biggest share first
    assert all(p.trials >= 4 for p in summary.progress)  # every task had its first round
    assert len(log.read_text().splitlines()) == 12
    best = best_records([log])
    assert {k for k, _, _ in best} == {p.task.key for p in summary.progress}

    schedules = TunedSchedules([log])
    files = build_model(load_onnx(small_model), tmp_path / "tuned.so", Target.parse("llvm"), schedules)
    assert sorted(set(schedules.used)) == sorted(p.task.key for p in summary.progress)
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    model = load_model(files.library)
    got = model.run({"x": x})["y"]
    model.close()
    import onnxruntime as ort
    want = ort.InferenceSession(str(small_model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_cli_tune_then_build_with_the_log(small_model, tmp_path, capsys):
    log = tmp_path / "cli.jsonl"
    assert main(["tune", str(small_model), "--trials", "6", "--round", "3", "--tuner", "random",
                 "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "6 trials logged" in out
    assert main(["check", str(small_model), "--log", str(log)]) == 0
    assert main(["build", str(small_model), "--log", str(log), "-o", str(tmp_path / "m.so")]) == 0
    assert "2 tasks with tuned schedules" in capsys.readouterr().out

    # the same records, as if measured for another ISA: never applied, and said once
    other = "x86_64-avx2" if Target.parse("llvm").isa != "x86_64-avx2" else "x86_64-avx512"
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text("".join(json.dumps({**json.loads(line), "isa": other}) + "\n"
                               for line in log.read_text().splitlines()))
    assert main(["build", str(small_model), "--log", str(foreign), "-o", str(tmp_path / "f.so")]) == 0
    out, err = capsys.readouterr()
    assert "0 tasks with tuned schedules" in out
    assert err.count("note:") == 1 and f"2 tasks have logged records only for {other}" in err
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    assert load_history([foreign], tasks, Target.parse("llvm")) == {}


def test_bad_logs_are_named_and_foreign_configs_rejected(small_model, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task": "k", "target": "llvm"}\n')
    with pytest.raises(LogError, match=r"bad.jsonl:1: not a measurement record"):
        best_records([bad])
    assert main(["build", str(small_model), "--log", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "x.so")]) == 2
    assert "missing.jsonl: cannot read" in capsys.readouterr().err

    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    forged = tmp_path / "forged.jsonl"
    record = {"task": tasks[0].key, "target": "llvm", "isa": Target.parse("llvm").isa, "costs": [1e-3], "error_kind": "NO_ERROR", "error_msg": "",
              "build_s": 0.1, "timestamp": 0.0, "config": {"template": "elsewhere", "space": "0", "index": 0, "knobs": {}}}
    forged.write_text(json.dumps(record) + "\n")
    with pytest.raises(LogError, match=r"forged.jsonl:1: .*template"):
        build_model(load_onnx(small_model), tmp_path / "f.so", "llvm", TunedSchedules([forged]))


def _logged(log):
    return [(r["task"], r["config"]["index"]) for r in map(json.loads, log.read_text().splitlines())]


def test_cli_tune_resumes_from_its_log_without_measuring_a_config_twice(small_model, tmp_path, capsys):
    log = tmp_path / "resume.jsonl"
    for _ in range(2):
        assert main(["tune", str(small_model), "--trials", "8", "--round", "4", "--tuner", "xgb",
                     "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "resuming from 8 records of 2 tasks" in out
    pairs = _logged(log)
    assert len(pairs) == 16 and len(set(pairs)) == 16


def test_history_feeds_each_tuner_its_records_and_model_based_ones_the_others(small_model, tmp_path):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    log = tmp_path / "first.jsonl"
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        tune_tasks(tasks, "llvm", 8, LocalBuilder(n_parallel=2), runner, tuner="random", round_trials=4,
                   callbacks=[JsonLinesLog(log)])
        target = Target.parse("llvm")
        history = load_history([log], tasks, target)
        assert sorted(map(len, history.values())) == [4, 4]
        assert load_history([log], tasks, Target.parse("cuda -arch=sm_90")) == {}  # other targets' records are not this run's
        big = max(tasks, key=lambda t: t.flops)
        only_big = {big.key: history[big.key]}
        resumed = tune_tasks(tasks, target, 8, LocalBuilder(n_parallel=2), runner, tuner="xgb", round_trials=4,
                             callbacks=[JsonLinesLog(log)], history=only_big)
    first_best = min(res.cost for _, res in history[big.key] if res.ok)
    progress = {p.task.key: p for p in resumed.progress}
    assert progress[big.key].best_cost <= first_best  # the logged best counts from the start
    small_key = next(k for k in progress if k != big.key)
    # only the task without a logged best gets a first round; the resumed one is chosen by time
    assert [json.loads(line)["task"] for line in log.read_text().splitlines()[8:12]] == [small_key] * 4
    small = progress[small_key].tuner
    assert small._transfer and {inp.task.key for inp, _ in small._transfer} == {big.key}
    pairs = _logged(log)
    assert len(pairs) == 16 and len(set(pairs)) == 16  # nothing of the big task's history measured again


def test_history_rejects_a_config_outside_the_tasks_space(small_model, tmp_path):
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    log = tmp_path / "tampered.jsonl"
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=1.0, threads=1)) as runner:
        tune_tasks(tasks[:1], "llvm", 2, LocalBuilder(n_parallel=2), runner, tuner="random",
                   callbacks=[JsonLinesLog(log)])
    lines = log.read_text().splitlines()
    record = json.loads(lines[1])
    record["config"]["knobs"]["mr"] = 5  # not one of the space's values
    log.write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    with pytest.raises(LogError, match=r"tampered.jsonl:2: .*mr"):
        load_history([log], tasks, Target.parse("llvm"))


def test_each_task_is_first_measured_at_its_untuned_config(tmp_path):
    """So a tuned build is never slower than the untuned one: the conv's first trial is the
    template's fallback config, which the untuned build uses."""
    from search_spaces import get_template
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
    assert first["config"]["index"] == get_template("Conv", "llvm").fallback(task, Target.parse("llvm")).index


class PerTaskCost:
    """A runner that times nothing (a test double for the device): every config of a task
    costs that task's fixed time, so no task improves after its first round."""

    def __init__(self, costs):
        self.costs = costs

    def run(self, inputs, builds):
        from autosched.measure import ErrorKind, MeasureResult
        return [MeasureResult((self.costs[i.task.key],), ErrorKind.NO_ERROR, "", 0.0, 0.0) for i in inputs]


def test_a_task_that_stops_improving_yields_rounds_to_the_others(small_model):
    from autosched.measure import NullBuilder
    tasks = extract_tasks(optimize(load_onnx(small_model))).tasks
    big, small = sorted(tasks, key=lambda t: -t.flops)
    runner = PerTaskCost({big.key: 10e-3, small.key: 1e-3})
    summary = tune_tasks(tasks, "llvm", 4 * 14, NullBuilder(), runner, tuner="random", round_trials=4)
    trials = {p.task.key: p.trials for p in summary.progress}
    # the big task costs 10x more but its rounds stopped paying: after 10 stale rounds the
    # small one is chosen again (weight × time alone would give the big one every round)
    assert trials[small.key] > 4 and trials[big.key] > trials[small.key]
    assert {p.task.key: p.stale_rounds for p in summary.progress}[big.key] >= 10
