"""Progress displays: the tally's figures, and what each mode prints (live table, JSON lines, quiet)."""
import io
import json

import pytest
from db_helpers import HERE, measured
from rich.console import Console

from autosched.api import TunePlan
from autosched.cli import main
from autosched.cli.progress import JsonLinesProgress, LiveProgress, Tally


def plan_for(tasks, trials=8, history=None):
    return TunePlan("mlp.onnx", HERE, tuple(tasks), trials, "t.db", history or {}, 0, 0)


def batch(records):
    return [i for i, _ in records], [r for _, r in records]


def test_tally_counts_trials_failures_bests_and_the_tuned_tasks_latency(tasks):
    resumed = measured(tasks[1], HERE, [4e-3])
    tally = Tally(plan_for(tasks, history={tasks[1].key: resumed}))
    others = len(tasks) - 2  # tasks of the tune not measured yet count as without a best
    assert tally.eta is None and tally.latency == (4e-3 * tasks[1].weight, others + 1)
    tally.add(*batch(measured(tasks[0], HERE, [2e-3, None, 1e-3, 3e-3])))
    t = tally.tasks[tasks[0].key]
    assert (t.trials, t.failures, t.best) == (4, 1, 1e-3)
    assert t.gflops == pytest.approx(tasks[0].flops / 1e-3 / 1e9)
    assert tally.latency == (pytest.approx(1e-3 * tasks[0].weight + 4e-3 * tasks[1].weight), others)
    snap = tally.snapshot()
    assert (snap["done"], snap["total"]) == (4, 8) and snap["eta_s"] is not None


def test_live_display_draws_the_table_with_totals(tasks):
    out = io.StringIO()
    live = LiveProgress(Console(file=out, force_terminal=True, width=160))
    live.start(plan_for(tasks))
    live(*batch(measured(tasks[0], HERE, [2e-3, 1e-3])))
    live.finish()
    text = out.getvalue()
    assert "database: t.db" in text and "GFLOP/s" in text and "trials 2/8" in text
    assert f"estimated latency of the tuned tasks {tasks[0].weight:g} ms" in text  # the caption wraps here
    assert f"({len(tasks) - 1} of {len(tasks)} tasks without a best yet)" in text


def test_json_lines_progress_is_one_object_per_event(tasks):
    out = io.StringIO()
    display = JsonLinesProgress(out)
    display.start(plan_for(tasks))
    display(*batch(measured(tasks[0], HERE, [2e-3, None])))
    start, event = map(json.loads, out.getvalue().splitlines())
    assert start["event"] == "start" and start["trials"] == 8
    assert (event["event"], event["trials"], event["failures"], event["best_ms"]) == ("batch", 2, 1, 2.0)


def test_cli_tune_quiet_and_json_lines(small_model, tmp_path, capsys):
    db = tmp_path / "t.db"
    args = ["tune", str(small_model), "--trials", "4", "--round", "4", "--tuner", "random", "--db", str(db),
            "--no-model-check"]
    assert main(args + ["--quiet"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"4 trials committed to {db}")
    assert main(args + ["--json-lines"]) == 0
    events = [json.loads(line)["event"] for line in capsys.readouterr().out.splitlines()]
    assert events == ["start", "batch", "summary"]
