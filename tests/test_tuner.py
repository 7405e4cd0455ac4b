import io
import json
import math

import numpy as np
import pytest
from synthetic import TARGET, FakeTask, best_cost, matmul_space, table

from autosched.measure import ErrorKind, MeasureInput, MeasureResult, replay_measure
from autosched.space import ChoiceKnob, ConfigSpace, SplitKnob
from autosched.tuner import (
    TUNERS,
    GATuner,
    JsonLinesLog,
    ModelBasedTuner,
    OptionError,
    ProgressDisplay,
    TunerError,
    get_tuner,
)

TASK = FakeTask("mm")
SPACE = matmul_space()
TABLE = table(SPACE)
FAST = {"random": {}, "grid": {}, "ga": {"pop_size": 8}, "xgb": {"plan_size": 8, "sa_iters": 30, "sa_chains": 16}}


class Recorder:
    """A measure_batch that replays a table and remembers every call."""

    def __init__(self, tab):
        self.measure = replay_measure(tab)
        self.batches = []

    def __call__(self, inputs):
        self.batches.append([inp.config.index for inp in inputs])
        return self.measure(inputs)

    @property
    def measured(self):
        return [i for b in self.batches for i in b]


def make(name, space=SPACE, seed=0, **options):
    return get_tuner(name)(TASK, space, TARGET, seed=seed, **{**FAST[name], **options})


# --- registry and options --------------------------------------------------

def test_registry():
    assert set(TUNERS) == {"random", "grid", "ga", "xgb"}
    assert get_tuner("ga") is GATuner and get_tuner("xgb") is ModelBasedTuner
    with pytest.raises(TunerError, match="unknown tuner 'annealing'.*random, grid, ga, xgb"):
        get_tuner("annealing")


@pytest.mark.parametrize("name, options, message", [
    ("random", {"pop_size": 8}, "tuner 'random' has no option 'pop_size'"),
    ("ga", {"pop_size": "8"}, "option 'pop_size' must be int"),
    ("ga", {"pop_size": True}, "option 'pop_size' must be int"),
    ("ga", {"pop_size": 1}, "pop_size must be >= 2"),
    ("ga", {"mutation_prob": 1.5}, "mutation_prob must be in"),
    ("ga", {"tournament": 0}, "tournament must be >= 1"),
    ("xgb", {"model": "svm"}, "unknown model 'svm'"),
    ("xgb", {"features": "loops"}, "unknown features 'loops'"),
    ("xgb", {"epsilon": -0.1}, "epsilon"),
    ("grid", {"batch_size": 0}, "batch_size must be >= 1"),
])
def test_options_are_validated(name, options, message):
    with pytest.raises(OptionError, match=message):
        get_tuner(name)(TASK, SPACE, TARGET, **options)


def test_model_based_with_an_all_random_plan():
    rec = Recorder(TABLE)
    assert make("xgb", epsilon=1.0).tune(30, rec).trials == 30
    assert len(set(rec.measured)) == 30


def test_float_options_accept_ints():
    assert make("ga", mutation_prob=1).options.mutation_prob == 1


@pytest.mark.parametrize("trials", [0, -3, 2.5, None])
def test_trials_must_be_positive(trials):
    with pytest.raises(TunerError, match="n_trials must be a positive int"):
        make("random").tune(trials, Recorder(TABLE))


def test_early_stopping_must_be_positive():
    with pytest.raises(TunerError, match="early_stopping"):
        make("random").tune(10, Recorder(TABLE), early_stopping=0)


# --- the loop's guarantees, for every strategy ----------------------------

@pytest.mark.parametrize("name", sorted(TUNERS))
def test_budget_batches_and_no_remeasure(name):
    tuner = make(name, batch_size=8)
    rec = Recorder(TABLE)
    summary = tuner.tune(50, rec)
    assert summary.trials == len(rec.measured) == 50
    assert all(1 <= len(b) <= 8 for b in rec.batches)
    summary = tuner.tune(30, rec)
    assert summary.trials == 30
    assert len(rec.measured) == len(set(rec.measured)) == 80
    assert tuner.visited == set(rec.measured)


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_exhausts_a_small_space_then_stops(name):
    space = ConfigSpace("tiny", (SplitKnob("t", 8, 2), ChoiceKnob("c", (1, 2, 3))))
    rec = Recorder({i: 1e-3 * (1 + i) for i in range(space.size)})
    summary = make(name, space=space, batch_size=5).tune(100, rec)
    assert sorted(rec.measured) == list(range(space.size))
    assert summary.trials == space.size and summary.best.index == 0 and not summary.stopped_early


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_single_config_space(name):
    space = ConfigSpace("one", ())
    rec = Recorder({0: 1e-3})
    assert make(name, space=space).tune(10, rec).trials == 1
    assert rec.measured == [0]


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_failures_are_never_best(name):
    # the fastest-looking half of the space fails; best must come from the rest
    costs = {i: 1e-3 * (1 + (i * 7919) % 1000) for i in range(SPACE.size)}
    cutoff = np.median(list(costs.values()))
    tab = {i: ErrorKind.RUNTIME_ERROR if c < cutoff else c for i, c in costs.items()}
    rec = Recorder(tab)
    summary = make(name).tune(60, rec)
    measured_ok = [tab[i] for i in rec.measured if not isinstance(tab[i], ErrorKind)]
    assert summary.best is not None and not isinstance(tab[summary.best.index], ErrorKind)
    assert summary.best_cost == min(measured_ok)


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_all_failures(name):
    rec = Recorder({i: ErrorKind.COMPILE_ERROR for i in range(SPACE.size)})
    summary = make(name).tune(40, rec)
    assert summary.trials == 40 and summary.best is None and summary.best_cost == math.inf


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_early_stopping(name):
    rec = Recorder({i: 1e-3 for i in range(SPACE.size)})  # nothing ever beats the first trial
    summary = make(name, batch_size=4).tune(200, rec, early_stopping=10)
    assert summary.stopped_early
    assert 11 <= summary.trials <= 11 + 4


@pytest.mark.parametrize("name", ["random", "ga", "xgb"])
def test_huge_space(name):
    space = ConfigSpace("huge", tuple(SplitKnob(f"t{i}", 4096, 4) for i in range(10)))
    assert space.size > 2**63

    def measure(inputs):
        return [MeasureResult((1e-3 * (1 + sum(inp.config.digits) % 13),), ErrorKind.NO_ERROR, "", 0.0, 0.0)
                for inp in inputs]

    seen = []
    summary = make(name, space=space).tune(40, measure, callbacks=[lambda i, r: seen.extend(x.config.index for x in i)])
    assert summary.trials == 40 and len(set(seen)) == 40


# --- callbacks -------------------------------------------------------------

def test_callbacks_receive_every_batch(tmp_path):
    stream = io.StringIO()
    log = tmp_path / "log.jsonl"
    batches = []
    make("random", batch_size=10).tune(25, Recorder(TABLE), callbacks=[
        ProgressDisplay(total=25, stream=stream), JsonLinesLog(log), lambda i, r: batches.append(len(i))])
    assert batches == [10, 10, 5]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("[mm] trials 25/25  best ")
    assert "GFLOP/s" in lines[-1] and "failures" in lines[-1]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 25
    for r in records:
        assert {"task", "target", "config", "costs", "error_kind", "error_msg", "build_s", "timestamp"} <= set(r)
        config = SPACE.from_json(r["config"])
        expected = TABLE[config.index]
        assert r["error_kind"] == (expected.name if isinstance(expected, ErrorKind) else "NO_ERROR")


def test_progress_before_any_success():
    stream = io.StringIO()
    display = ProgressDisplay(stream=stream)
    inp = MeasureInput(TASK, TARGET, SPACE.get(0))
    display([inp], [MeasureResult.failure(ErrorKind.RUN_TIMEOUT, "", 0.0, 0.0)])
    assert stream.getvalue() == "[mm] trials 1  best none yet  failures 1\n"


# --- search quality on the synthetic problem -------------------------------

def run_synthetic(name, seed, n_trials, **options):
    costs = []
    tuner = get_tuner(name)(TASK, SPACE, TARGET, seed=seed, **options)
    tuner.tune(n_trials, replay_measure(TABLE),
               callbacks=[lambda i, r: costs.extend(x.cost if x.ok else math.inf for x in r)])
    return costs


def test_model_based_beats_random_search():
    """Success rate over 12 seeds: runs whose best after 128 trials is within 5%
    of the optimum of a 3.5k-config space. Measured over 30 seeds: model-based
    73%, random 13%; bootstrap puts the chance that 12 fixed seeds miss this
    margin at about 1%, where a mean over 5 seeds missed it about 1 time in 4."""
    opt, n, seeds = best_cost(TABLE), 128, range(12)
    hits = {}
    for name, options in (("random", {}), ("xgb", {"plan_size": 16, "sa_iters": 100, "sa_chains": 32})):
        bests = [min(run_synthetic(name, seed, n, **options)) / opt for seed in seeds]
        hits[name] = sum(b <= 1.05 for b in bests)
    assert hits["xgb"] >= hits["random"] + 3, hits


def test_transfer_records_guide_the_first_plan():
    other = matmul_space(128, 128, 64)
    other_table = table(other)
    rng = np.random.default_rng(0)
    other_task = FakeTask("mm128")
    inputs = [MeasureInput(other_task, TARGET, other.get(i)) for i in other.sample(200, rng)]
    transfer = list(zip(inputs, replay_measure(other_table)(inputs)))
    opt = best_cost(TABLE)
    warm, cold = [], []
    for seed in range(4):
        options = {"plan_size": 16, "batch_size": 16, "sa_iters": 100, "sa_chains": 32}
        for runs, extra in ((warm, {"transfer": transfer}), (cold, {})):
            tuner = ModelBasedTuner(TASK, SPACE, TARGET, seed=seed, **extra, **options)
            runs.append(tuner.tune(16, replay_measure(TABLE)).best_cost / opt)
    assert np.mean(warm) < np.mean(cold) - 0.3, (warm, cold)


# --- resuming from history ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAST))
def test_history_is_never_measured_again_and_its_best_counts(name):
    inputs = [MeasureInput(TASK, TARGET, SPACE.get(i)) for i in SPACE.sample(40, np.random.default_rng(7))]
    history = list(zip(inputs, replay_measure(TABLE)(inputs)))
    tuner = make(name, seed=1)
    tuner.load_history(history + history[:5])  # repeats are harmless
    logged_best = min(res.cost for _, res in history if res.ok)
    assert tuner.best_cost == logged_best
    rec = Recorder(TABLE)
    summary = tuner.tune(48, rec)
    assert not set(rec.measured) & {inp.config.index for inp, _ in history}
    assert summary.best_cost <= logged_best


def test_model_based_tuner_resumed_from_history_plans_with_a_trained_model():
    """The first batch after resuming comes from a model trained on the history: mostly configs
    of the space's fastest quarter, where a fresh tuner's random first batch has few."""
    inputs = [MeasureInput(TASK, TARGET, SPACE.get(i)) for i in SPACE.sample(64, np.random.default_rng(3))]
    valid = [c for c in TABLE.values() if isinstance(c, float)]
    fast = {i for i, c in TABLE.items() if isinstance(c, float) and c <= np.quantile(valid, 0.25)}
    share_fast = []
    for history in (list(zip(inputs, replay_measure(TABLE)(inputs))), []):
        tuner = make("xgb", plan_size=16)
        tuner.load_history(history)
        rec = Recorder(TABLE)
        tuner.tune(16, rec)
        share_fast.append(len(fast & set(rec.batches[0])) / len(rec.batches[0]))
    resumed, fresh = share_fast
    assert resumed >= 0.5 > fresh, share_fast


def test_history_from_another_space_is_refused():
    other = matmul_space(128, 128, 64)
    inp = MeasureInput(TASK, TARGET, other.get(0))
    with pytest.raises(TunerError, match="space"):
        make("random").load_history([(inp, replay_measure(table(other))([inp])[0])])


@pytest.mark.parametrize("name", sorted(FAST))
def test_queued_configs_are_measured_first_and_once(name):
    first = SPACE.sample(3, np.random.default_rng(11))
    tuner = make(name)
    tuner.queue(first + first[:1])
    rec = Recorder(TABLE)
    tuner.tune(20, rec)
    assert rec.measured[:3] == first and len(set(rec.measured)) == 20
    tuner.queue(first)  # all measured already: nothing is repeated
    tuner.tune(4, rec)
    assert len(set(rec.measured)) == 24


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_configs_the_template_refuses_or_folds_are_never_measured_nor_counted(name):
    """`restrict`: a refused proposal, or one folded into a config already visited, is visited
    (never proposed again) but not measured; the budget buys measurements only."""
    tuner = make(name, batch_size=8)
    def admit(config):  # even indices stand for the odd one after them; multiples of 3 refused
        canonical = config.index - config.index % 2
        return None if canonical % 3 == 0 else SPACE.get(canonical)

    tuner.restrict(admit)
    rec = Recorder(TABLE)
    summary = tuner.tune(40, rec)
    assert summary.trials == len(rec.measured) == len(set(rec.measured)) == 40
    assert all(i % 3 and i % 2 == 0 for i in rec.measured)
    assert tuner.refused > 0 and set(rec.measured) <= tuner.visited
