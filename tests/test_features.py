"""Loop-nest features: deterministic, named the same for every task of an op, and usable by
the cost models and the model-based tuner."""
import numpy as np
import pytest
from task_helpers import conv_task, matmul_task

from autosched.measure import NullBuilder, ReplayRunner, measure_with
from autosched.target import Target
from autosched.templates import get_template
from autosched.tuner import ModelBasedTuner
from cost_models import FEATURES, LoopFeatures, XGBCostModel, create_cost_model, loop_nest_features
from cost_models.loop_features import NAMES

TARGET = Target.parse("llvm -mcpu=skylake-avx512")  # the features read the lowered code, which runs nowhere


def _space(task):
    return get_template(task.op, "llvm").space(task, TARGET)


def _row(task, values):
    space = _space(task)
    feats = LoopFeatures(TARGET)
    return dict(zip(feats.names(task, space), feats.extract(task, space, np.array([space.from_values(values).index]))[0]))


MM_VALUES = {"mr": 4, "nr": 32, "mb": 2, "tile_k": [2, 8, 2], "tile_order": ["j", "i"], "parallel_depth": 1,
             "pack_a": True}


def test_features_describe_the_hot_loop_nest():
    row = _row(matmul_task((32, 32), (32, 64)), MM_VALUES)
    assert row["valid"] == 1
    assert row["hot.vector_lanes"] == 16 and row["L0.kind=vectorize"] == 1
    assert row["L0.log2_extent"] == pytest.approx(np.log2(17))
    assert row["L1.kind=unroll"] == 1 and row["L2.kind=unroll"] == 1  # the 2 vectors, the 4 rows of the block
    assert row["L0.store.log2_stride"] == 1  # log2(1 + 1): the accumulator row is contiguous
    assert row["hot.log2_trips"] == pytest.approx(np.log2(1 + 32 * 64 * 32), rel=1e-6)
    assert row["hot.add"] == 1 and row["hot.mul"] == 1 and row["hot.load"] == 3
    assert row["hot.log2_parallel"] == pytest.approx(np.log2(1 + 2))  # column panels: 64 / 32
    assert row["log2_local_bytes"] == pytest.approx(np.log2(1 + 8 * 32 * 4))


def test_features_are_deterministic_and_follow_the_config():
    task = matmul_task((48, 40), (40, 64))
    space, feats = _space(task), LoopFeatures(TARGET)
    idx = np.array(space.sample(6, np.random.default_rng(0)), dtype=object)
    first, again = feats.extract(task, space, idx), LoopFeatures(TARGET).extract(task, space, idx[::-1])[::-1]
    assert first.shape == (6, len(NAMES)) and first.dtype == np.float32
    assert np.array_equal(first, again)
    assert len({row.tobytes() for row in first}) == 6


@pytest.mark.parametrize("make", [
    lambda shape: matmul_task((shape, 40), (40, 2 * shape)),
    lambda shape: conv_task((1, 8, shape, shape), (16, 8, 3, 3), pad=1),
])
def test_two_tasks_of_one_op_share_every_column(make):
    a, b = make(16), make(24)
    feats = LoopFeatures(TARGET)
    assert feats.names(a, _space(a)) == feats.names(b, _space(b)) == NAMES
    row_b = feats.extract(b, _space(b), np.array([0]))[0]
    model = XGBCostModel(a, _space(a), features=feats)
    assert np.array_equal(model.rows(b, _space(b), [0])[0], row_b)  # aligned by name: nothing dropped


def test_loop_nest_features_of_a_plain_function():
    from autosched import te
    from autosched.lower import lower
    from autosched.schedule import create_schedule
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i * 2 % 64] * 2.0, name="y")
    row = loop_nest_features(lower(create_schedule(y), [x, y]))
    assert row["L0.kind=serial"] == 1 and row["hot.depth"] == 1
    assert row["L0.load0.log2_stride"] == pytest.approx(np.log2(3))


def test_registry_builds_loop_models_for_a_target():
    task = matmul_task((16, 16), (16, 32))
    space = _space(task)
    model = create_cost_model("xgb-rank", task, space, features="knob+loop", target=TARGET)
    assert set(NAMES) < set(model.columns) and "mr" in model.columns
    with pytest.raises(ValueError, match="pass target="):
        create_cost_model("forest", task, space, features="loop")
    assert {"knob", "loop", "knob+loop"} <= set(FEATURES)


def test_model_based_tuner_runs_on_loop_features():
    """Costs from a known rule over real configs: a bigger register block is faster. The tuner
    with knob+loop features measures every config once and finds better ones than its first plan."""
    task = matmul_task((24, 32), (32, 64))
    space = _space(task)
    cost = {i: 1e-3 / (space.get(i)["mr"] * space.get(i)["nr"]) * (1 + 0.01 * (i % 7)) for i in range(space.size)}
    tuner = ModelBasedTuner(task, space, TARGET, seed=0, features="knob+loop", plan_size=16, sa_chains=16,
                            sa_iters=20, sa_patience=5)
    seen = []
    summary = tuner.tune(48, measure_with(NullBuilder(), ReplayRunner(cost)),
                         [lambda inputs, results: seen.extend(i.config.index for i in inputs)])
    assert summary.trials == 48 and len(set(seen)) == 48
    first = min(cost[i] for i in seen[:16])
    assert summary.best_cost <= first
    assert space.get(summary.best.index)["mr"] * space.get(summary.best.index)["nr"] >= 6 * 32
