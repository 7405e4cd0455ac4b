"""Cost models that start informed (issue 18, item 6): training logs sampled over each task's
ranking (`db export --sample`, gzip-compressed), shipped in `tuning_logs/training/`, and a tune's
cost models warm-started on them where the user's database has too few records of a template."""
import gzip
import math

import onnx
import pytest
from db_helpers import HERE, measured
from isa import AVX2, AVX512

from autosched.api import tune
from autosched.cli import main
from autosched.database import Database, StoredRecord, history, pretraining, read_jsonl, training_database
from autosched.database.jsonl import spread
from autosched.database.queries import space_of
from autosched.target import CpuInfo, Target
from autosched.zoo import mlp

OTHER_ISA = Target.parse("llvm", host=CpuInfo("Example CPU C", frozenset({"avx", "avx2", "fma"})))


def _stored(task, target, costs):
    return [StoredRecord.of(r) for r in measured(task, target, costs)]


def test_a_sample_spreads_over_each_tasks_ranking_keeping_the_best_and_the_failures(tasks):
    costs = [5e-3, None, 1e-3, 4e-3, 2e-3, 3e-3, None, 6e-3]
    stored = _stored(tasks[0], HERE, costs) + _stored(tasks[1], HERE, [1e-3, 2e-3])
    kept = spread(stored, 3)
    first = [s.result.cost if s.result.ok else None for s in kept if s.key == tasks[0].key]
    # ranks 0, 4 and 9 of [1, 2, 3, 4, 5, 6, fail, fail] (evenly spaced over 8): 1 ms, 5 ms and a failure,
    # in the order they were measured
    assert first == [5e-3, 1e-3, None]
    assert [s.result.cost for s in kept if s.key == tasks[1].key] == [1e-3, 2e-3]  # fewer than 3: all of them
    assert all(math.isfinite(s.result.cost) for s in spread(stored, 1))  # one a task: its best
    with pytest.raises(ValueError, match="at least one record"):
        spread(stored, 0)


def test_db_export_writes_a_compressed_sample_that_import_and_training_read(db_url, tmp_path, tasks, capsys):
    db = Database(db_url)
    db.commit(measured(tasks[0], HERE, [3e-3, 1e-3, 2e-3, None, 4e-3]))
    out = tmp_path / "training" / "here.jsonl.gz"
    out.parent.mkdir()
    assert main(["db", "export", "--db", db_url, "--sample", "2", "-o", str(out)]) == 0
    assert "wrote 2 records" in capsys.readouterr().err
    assert [s.result.ok for s in read_jsonl(out)] == [True, False]  # the best and the last-ranked (a failure)
    gzip.decompress(out.read_bytes())  # really gzip
    assert [s.result.cost for s in training_database(tmp_path).stored() if s.result.ok] == [1e-3]
    assert training_database(tmp_path / "nothing") is None
    with pytest.raises(SystemExit):
        main(["db", "export", "--db", db_url, "--sample", "0"])
    assert "expected a positive number of records" in capsys.readouterr().err


def test_pretraining_adds_other_workloads_of_the_same_isa_after_the_users_own(monkeypatch, tasks):
    from autosched.database import queries
    training = Database("sqlite://")
    training.commit(measured(tasks[0], HERE, [1e-3, 2e-3, 3e-3]))   # a workload of the tune: never transferred
    training.commit(measured(tasks[1], HERE, [1e-3, 2e-3]))
    training.commit(measured(tasks[2], HERE, [1e-3]))
    training.commit(measured(tasks[2], OTHER_ISA, [2e-3]))         # another ISA class: only for that one
    user = Database("sqlite://")
    found = history(user, tasks[:1], HERE)
    assert found == {}
    extra = pretraining(training, tasks[:1], HERE, found)
    assert {k: len(v) for k, v in extra.items()} == {tasks[1].key: 2, tasks[2].key: 1}
    assert {k: len(v) for k, v in pretraining(training, tasks[:1], OTHER_ISA, {}).items()} == {tasks[2].key: 1}
    # the user's own transferred records come first: the logs add no workload the database gave,
    # and fill only the room it leaves
    user.commit(measured(tasks[2], HERE, [1e-3, 2e-3]))
    found = history(user, tasks[:1], HERE)
    assert len(found[tasks[2].key]) == 2
    assert {k: len(v) for k, v in pretraining(training, tasks[:1], HERE, found).items()} == {tasks[1].key: 2}
    monkeypatch.setattr(queries, "TRANSFER_LIMIT", 3)
    assert sum(map(len, pretraining(training, tasks[:1], HERE, found).values())) == 1
    monkeypatch.setattr(queries, "TRANSFER_LIMIT", 2)
    assert pretraining(training, tasks[:1], HERE, found) == {}


def test_a_tune_from_an_empty_database_starts_trained_on_the_shipped_logs(tmp_path, tasks):
    """A real tune of an MLP whose Gemm shapes no log has, with a shipped directory of two logged
    workloads of the same template; `shipped=False` (tune --no-shipped) starts untrained."""
    logged = Database(tmp_path / "logged.db")
    logged.commit(measured(tasks[0], Target.parse("llvm"), [1e-3, 2e-3, 3e-3]))
    logged.commit(measured(tasks[1], Target.parse("llvm"), [1e-3, 2e-3]))
    (tmp_path / "shipped" / "training").mkdir(parents=True)
    assert main(["db", "export", "--db", str(tmp_path / "logged.db"), "--sample", "2",
                 "-o", str(tmp_path / "shipped" / "training" / "x.jsonl.gz")]) == 0
    model = tmp_path / "other.onnx"
    onnx.save(mlp(batch=8, sizes=(48, 40, 10)), model)
    plans = []

    class Plan:
        def start(self, plan):
            plans.append(plan)

        def __call__(self, inputs, results):
            pass

    out = tune(model, "llvm", 2, db=tmp_path / "a.db", round_trials=1, model_check=False, substitutions=False,
               shipped=tmp_path / "shipped", callbacks=[Plan()])
    assert out.pretrained == 4 == plans[0].pretrained and out.transferred == 0
    out = tune(model, "llvm", 2, db=tmp_path / "b.db", round_trials=1, model_check=False, substitutions=False,
               shipped=False)
    assert out.pretrained == 0


def test_a_tune_says_what_its_cost_models_start_trained_on():
    from types import SimpleNamespace

    from autosched.cli.progress import _announce
    lines = []
    plan = SimpleNamespace(tasks=(), database="a.db", resumed=0, history={}, transferred=0, pretrained=0, caches="warm")
    _announce(plan, lines.append)
    _announce(SimpleNamespace(**{**vars(plan), "pretrained": 40}), lines.append)
    _announce(SimpleNamespace(**{**vars(plan), "pretrained": 40, "transferred": 7}), lines.append)
    assert [line for line in lines if "trained" in line] == [
        "cost models start trained on 40 records of the shipped training logs",
        "cost models start trained on 7 records of other workloads in the database and 40 records of the shipped "
        "training logs"]


def test_the_shipped_training_logs_hold_only_records_valid_in_todays_spaces():
    """Every record of the shipped logs is of a space version the templates still make, so none is
    skipped when a tune reads them (re-export them after a template change)."""
    from autosched.task import task_from_key
    training = training_database()
    assert training is not None
    stored = list(training.stored())
    assert len({s.key for s in stored}) >= 20 and {s.target.isa for s in stored} == {"x86_64-avx2"}
    targets = {"x86_64-avx2": AVX2, "x86_64-avx512": AVX512}  # the ISA it was measured in, whatever this host's
    stale = [s.key for s in stored
             if (space := space_of(task_from_key(s.key, s.flops or 0), targets[s.target.isa])) is None
             or space.fingerprint != s.space]
    assert stale == []
