import dataclasses
import json

import pytest
from synthetic import TARGET, FakeTask, matmul_space

from autosched.measure import (
    Builder,
    BuildResult,
    ErrorKind,
    MeasureInput,
    MeasureResult,
    RecordError,
    ReplayRunner,
    Runner,
    measure_with,
    record_to_json,
    replay_measure,
)

SPACE = matmul_space()
TASK = FakeTask("mm")


def inputs(*indices):
    return [MeasureInput(TASK, TARGET, SPACE.get(i)) for i in indices]


def test_errors_never_ride_in_costs():
    ok = MeasureResult((2e-3, 1e-3, 3e-3), ErrorKind.NO_ERROR, "", 0.1, 0.0)
    assert ok.ok and ok.cost == 2e-3
    with pytest.raises(RecordError, match="must not carry costs"):
        MeasureResult((1.0,), ErrorKind.RUNTIME_ERROR, "boom", 0.0, 0.0)
    with pytest.raises(RecordError, match="positive finite costs"):
        MeasureResult((), ErrorKind.NO_ERROR, "", 0.0, 0.0)
    with pytest.raises(RecordError, match="positive finite costs"):
        MeasureResult((float("inf"),), ErrorKind.NO_ERROR, "", 0.0, 0.0)
    with pytest.raises(RecordError, match="ErrorKind"):
        MeasureResult((), "RUNTIME_ERROR", "", 0.0, 0.0)
    failed = MeasureResult.failure(ErrorKind.WRONG_ANSWER, "max abs diff 3.0", 0.2, 5.0)
    assert not failed.ok
    with pytest.raises(RecordError, match="no cost"):
        _ = failed.cost


def test_result_json_round_trip_and_validation():
    res = MeasureResult((1e-3, 2e-3), ErrorKind.NO_ERROR, "", 0.25, 1700000000.0)
    assert MeasureResult.from_json(json.loads(json.dumps(res.to_json()))) == res
    assert "node" not in res.to_json()  # measured here: a log line reads as before
    remote = dataclasses.replace(res, node="gpu-box-3")
    assert MeasureResult.from_json(json.loads(json.dumps(remote.to_json()))) == remote
    bad = [dict(res.to_json(), error_kind="EXPLODED"), dict(res.to_json(), costs="fast"),
           dict(res.to_json(), costs=[True]), {"costs": []}, dict(res.to_json(), error_msg=3),
           dict(res.to_json(), error_kind="RUN_TIMEOUT"), dict(res.to_json(), node=7)]
    for obj in bad:
        with pytest.raises(RecordError):
            MeasureResult.from_json(obj)


def test_record_to_json():
    (inp,) = inputs(7)
    res = MeasureResult.failure(ErrorKind.COMPILE_TIMEOUT, "gcc took 30 s", 30.0, 1.0)
    line = json.loads(json.dumps(record_to_json(inp, res)))
    assert line["task"] == "mm" and line["target"] == "llvm" and line["error_kind"] == "COMPILE_TIMEOUT"
    assert SPACE.from_json(line["config"]) == inp.config
    assert MeasureResult.from_json(line) == res


class OddFailsBuilder(Builder):
    def build(self, inputs):
        return [BuildResult(None, ErrorKind.COMPILE_ERROR, "odd", 0.5) if inp.config.index % 2
                else BuildResult(f"/tmp/{inp.config.index}.so", ErrorKind.NO_ERROR, "", 0.5) for inp in inputs]


class RecordingRunner(Runner):
    def __init__(self):
        self.seen = []

    def run(self, inputs, builds):
        self.seen += [(inp.config.index, b.artifact) for inp, b in zip(inputs, builds)]
        return [MeasureResult((1e-3,), ErrorKind.NO_ERROR, "", b.build_s, 0.0) for b in builds]


def test_measure_with_runs_only_what_built():
    runner = RecordingRunner()
    results = measure_with(OddFailsBuilder(), runner)(inputs(0, 1, 2, 3))
    assert runner.seen == [(0, "/tmp/0.so"), (2, "/tmp/2.so")]
    assert [r.error_kind for r in results] == [ErrorKind.NO_ERROR, ErrorKind.COMPILE_ERROR] * 2
    assert results[1].error_msg == "odd" and results[1].build_s == 0.5


def test_measure_with_checks_counts():
    class Short(Runner):
        def run(self, inputs, builds):
            return []

    with pytest.raises(RecordError, match="runner returned 0 results for 2"):
        measure_with(OddFailsBuilder(), Short())(inputs(0, 2))


def test_replay_runner():
    measure = replay_measure({0: 1e-3, 1: (2e-3, 3e-3), 2: ErrorKind.RUN_TIMEOUT})
    r0, r1, r2 = measure(inputs(0, 1, 2))
    assert r0.costs == (1e-3,) and r1.cost == 2.5e-3
    assert r2.error_kind is ErrorKind.RUN_TIMEOUT and r2.costs == ()
    with pytest.raises(RecordError, match="no result for config 3"):
        measure(inputs(3))
    sparse = replay_measure({0: 1e-3}, missing=ErrorKind.RUNTIME_ERROR)
    assert sparse(inputs(5))[0].error_kind is ErrorKind.RUNTIME_ERROR
    with pytest.raises(RecordError, match="NO_ERROR"):
        replay_measure({0: ErrorKind.NO_ERROR})


def test_replay_from_records():
    recs = list(zip(inputs(0, 1), [MeasureResult((1e-3,), ErrorKind.NO_ERROR, "", 0.0, 0.0),
                                   MeasureResult.failure(ErrorKind.WRONG_ANSWER, "diff", 0.0, 0.0)]))
    runner = ReplayRunner.from_records(recs, missing=ErrorKind.RUNTIME_ERROR)
    out = runner.run(inputs(1, 0, 9), [])
    assert [r.error_kind for r in out] == [ErrorKind.WRONG_ANSWER, ErrorKind.NO_ERROR, ErrorKind.RUNTIME_ERROR]
    other = matmul_space(32, 32, 16)
    foreign = (MeasureInput(TASK, TARGET, other.get(0)), recs[0][1])
    with pytest.raises(RecordError, match="different spaces"):
        ReplayRunner.from_records(recs + [foreign])
