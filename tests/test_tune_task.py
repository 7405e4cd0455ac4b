"""autosched.tune_task: the whole tuning pipeline in one call, and its refusals."""
import json
import math

import pytest
from task_helpers import matmul_task, softmax_task

import autosched
from autosched.measure import ErrorKind, NullBuilder, ReplayRunner
from autosched.measure.local import LocalRunner, RunnerOptions
from autosched.target import Target, TargetError
from autosched.templates import TemplateError, get_template
from autosched.tuner import OptionError, TunerError

TASK = matmul_task((32, 24), (24, 48), relu=True)
SPACE = get_template("MatMul", "llvm").space(TASK, Target.parse("llvm"))


def test_tunes_a_small_matmul_end_to_end(tmp_path):
    log = tmp_path / "tune.jsonl"
    with LocalRunner(RunnerOptions(repeat=2, min_repeat_ms=2)) as runner:
        result = autosched.tune_task(TASK, "llvm", trials=16, tuner="xgb", runner=runner, log=log, plan_size=8)
    assert len(result.records) == 16
    assert len({inp.config.index for inp, _ in result.records}) == 16
    assert result.failures == 0, [res.error_msg for _, res in result.records if not res.ok]
    assert result.best_cost == min(res.cost for _, res in result.records)
    assert result.best in [inp.config for inp, res in result.records if res.cost == result.best_cost]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 16 and all(line["error_kind"] == "NO_ERROR" for line in lines)
    assert SPACE.from_json(lines[0]["config"]) == result.records[0][0].config


def _replay(cost_of_index):
    """Measurement answered from a table over the whole space: tuners run without compiling."""
    return dict(runner=ReplayRunner({i: cost_of_index(i) for i in range(SPACE.size)}), builder=NullBuilder())


@pytest.mark.parametrize("tuner", ["random", "ga", "xgb", "grid"])
def test_every_tuner_by_name_without_compiling(tuner):
    result = autosched.tune_task(TASK, "llvm", trials=40, tuner=tuner, seed=1, **_replay(lambda i: 1.0 + i % 97))
    assert len(result.records) == 40 and result.best_cost == min(r.cost for _, r in result.records)


def test_early_stopping_and_failures_are_reported():
    result = autosched.tune_task(TASK, "llvm", trials=200, tuner="random", early_stopping=10,
                                 **_replay(lambda i: ErrorKind.WRONG_ANSWER if i % 2 else 1.0))
    assert result.stopped_early and len(result.records) < 200
    assert result.failures > 0
    all_failed = autosched.tune_task(TASK, "llvm", trials=5, tuner="random",
                                     **_replay(lambda i: ErrorKind.RUNTIME_ERROR))
    assert all_failed.best is None and math.isinf(all_failed.best_cost)


@pytest.mark.parametrize("trials", [0, -3, 2.5, True])
def test_trials_must_be_positive(trials):
    with pytest.raises(TunerError, match="trials must be a positive int"):
        autosched.tune_task(TASK, "llvm", trials=trials)


def test_unknown_tuner_option_target_and_op_are_refused():
    with pytest.raises(TunerError, match="unknown tuner 'annealing'; known: random, grid, ga, xgb"):
        autosched.tune_task(TASK, "llvm", trials=4, tuner="annealing")
    with pytest.raises(OptionError, match="no option 'plan'"):
        autosched.tune_task(TASK, "llvm", trials=4, tuner="xgb", plan=8)
    with pytest.raises(TargetError, match="unknown target kind 'tpu'"):
        autosched.tune_task(TASK, "tpu", trials=4)
    with pytest.raises(TargetError, match="unknown option -mfoo"):
        autosched.tune_task(TASK, "llvm -mfoo=bar", trials=4)
    with pytest.raises(TemplateError, match="no template for op 'Softmax' on target 'llvm'"):
        autosched.tune_task(softmax_task((4, 8)), "llvm", trials=4)
