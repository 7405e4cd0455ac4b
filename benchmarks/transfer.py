"""A cost model that starts informed: tuning a model no run has seen, with and without the
records of other models, from the database or from the shipped training logs (issue 18, item 6).

    python benchmarks/transfer.py [--sources resnet18,mobilenet_v2] [--source-trials 300]
                                  [--target squeezenet] [--trials 200] [--seed 0] [--json] [--quick]

The `--target` model (a zoo model or `squeezenet`, which nothing shipped covers) is tuned for
`--trials` three times with the xgb tuner and the same seed, each run into its own database:
- `database`: a database into which the `--sources` (zoo models) were tuned for
  `--source-trials` each first: its cost models start trained on the other workloads' records
  of the same templates (`tune`'s transfer, what it does whenever the database has them);
- `shipped`: an empty database, the cost models starting trained on the shipped training logs
  (`tuning_logs/training/`, records of this ISA class only), as a new user's first tune does;
- `none`: an empty database and nothing shipped (`tune --no-shipped`).
The `database` and `none` runs ignore everything shipped. All tunes skip the model check and the
graph substitutions, so that only measuring counts.

Per run, the curve of the estimated model latency (Σ weight × each task's best so far, from the
first trial at which every tunable task has a valid record: rounds of `--round` trials a task,
4 by default, so that SqueezeNet's 18 tunable tasks get theirs within the first 72 trials) and
how many trials it took to come within 5% of, and to reach, the final estimate of the `none`
run. `--json` prints one object: `sources`, `source_trials`, `target`, `trials`, `seed` and per
run in `runs`: `started_on` (records of other workloads the cost models started trained on),
`curve` (trials → ms), `final_ms`, `trials_to_5pct`, `trials_to_match`. `--quick` is a smoke
run: a small MLP tuned 12 trials as the source, whose records, sampled two a task as `db export
--sample` writes a training log, stand in for the shipped ones, and one of other shapes (the same
templates) 8 trials as the target, rounds of 2, each candidate timed once for at least 1 ms.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import shutil
import sqlite3
import tempfile
from pathlib import Path

import onnx

from autosched import zoo
from autosched.api import model_tasks, tune
from autosched.database import Database, export_jsonl
from autosched.measure.local import LocalRunner, RunnerOptions
from autosched.target import Target
from autosched.task_scheduler import tunable


def curve(db: Path, session: int, model: Path, target: Target) -> dict[int, float]:
    """Trials → estimated model latency (ms) after that many of the session's records, from the
    first trial at which every tunable task of `model` has a valid record."""
    _, tasks = model_tasks(model, target, db=db, substitutions=False)
    weight = {t.key: t.weight for t in tunable(tasks, target)[0]}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT w.key, r.cost FROM records r JOIN workloads w ON w.id = r.workload_id "
                            "WHERE r.session_id = ? ORDER BY r.id", (session,)).fetchall()
    best: dict[str, float] = {}
    out = {}
    for n, (key, cost) in enumerate(rows, start=1):
        if cost is not None and key in weight:
            best[key] = min(cost, best.get(key, cost))
        if len(best) == len(weight):
            out[n] = round(1e3 * sum(weight[k] * c for k, c in best.items()), 4)
    return out


def trials_to(points: dict[int, float], level: float) -> int | None:
    return next((n for n, ms in points.items() if ms <= level), None)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", default="resnet18,mobilenet_v2", help="zoo models tuned first (comma-separated)")
    p.add_argument("--source-trials", type=int, default=300)
    p.add_argument("--target", default="squeezenet", help="the unseen model: a zoo model or squeezenet")
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--round", type=int, default=4,
                   help="trials per task per round (tune's --round; default 4, so that the first round, which "
                        "gives every task its first records and starts the curve, fits in --trials)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: two small MLPs, a few trials")
    args = p.parse_args(argv)
    target = Target.parse("llvm")
    with tempfile.TemporaryDirectory(prefix="autosched-transfer-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        # --quick times each candidate once for at least 1 ms (the default, 3 x 40 ms, is most of a
        # smoke run's time); a full run times as `tune` does
        runner = stack.enter_context(LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=1.0))) if args.quick else None
        if args.quick:
            sources = {"mlp-small": zoo.mlp(batch=16, sizes=(64, 96, 10))}
            unseen = ("mlp-other", zoo.mlp(batch=24, sizes=(80, 112, 10)))
            args.source_trials, args.trials, args.round = 12, 8, 2
        else:
            sources = {name: _model(name) for name in args.sources.split(",")}
            unseen = (args.target, _model(args.target))
        informed = workdir / "sources.db"
        for name, model in sources.items():
            onnx.save(model, workdir / f"{name}.onnx")
            tune(workdir / f"{name}.onnx", target, args.source_trials, db=informed, seed=args.seed,
                 round_trials=args.round, model_check=False, substitutions=False, shipped=False, runner=runner)
        shipped: bool | Path = True
        if args.quick:  # a sample of the source's records as a shipped training log, as `db export --sample 2` writes it
            shipped = workdir / "shipped"
            (shipped / "training").mkdir(parents=True)
            with Database(informed) as db, gzip.open(shipped / "training" / "quick.jsonl.gz", "wt") as f:
                export_jsonl(db, f, sample=2)
        path = workdir / f"{unseen[0]}.onnx"
        onnx.save(unseen[1], path)
        shutil.copy(informed, workdir / "database.db")
        out: dict = {"sources": list(sources), "source_trials": args.source_trials, "target": unseen[0],
                     "trials": args.trials, "seed": args.seed, "runs": {}}
        for run, uses in (("none", False), ("database", False), ("shipped", shipped)):
            db_path = workdir / f"{run}.db"
            outcome = tune(path, target, args.trials, db=db_path, seed=args.seed, round_trials=args.round,
                           model_check=False, substitutions=False, shipped=uses, runner=runner)
            points = curve(db_path, outcome.session, path, target)
            out["runs"][run] = {"started_on": outcome.transferred + outcome.pretrained, "curve": points,
                                "final_ms": points[max(points)] if points else None}
        goal = out["runs"]["none"]["final_ms"]
        for row in out["runs"].values():
            row["trials_to_5pct"] = None if goal is None else trials_to(row["curve"], 1.05 * goal)
            row["trials_to_match"] = None if goal is None else trials_to(row["curve"], goal)
    if args.json:
        print(json.dumps(out))
    else:
        _print(out)
    return out


def _model(name: str) -> onnx.ModelProto:
    builders = {**zoo.MODELS, **zoo.OTHERS}
    if name not in builders:
        raise SystemExit(f"transfer.py: unknown model {name!r}: expected one of {', '.join(builders)}")
    return builders[name]()


def _print(out: dict) -> None:
    print(f"{out['target']}, {out['trials']} trials (xgb, seed {out['seed']}); the database run after "
          f"{', '.join(out['sources'])} tuned {out['source_trials']} trials each")
    goal = out["runs"]["none"]["final_ms"]
    for run, row in out["runs"].items():
        points = row["curve"]
        marks = ", ".join(f"{n}: {points[n]:.3f}" for n in sorted(points)[::max(1, len(points) // 8)])
        print(f"  {run}: started trained on {row['started_on']} records; final {row['final_ms']} ms; within 5% of "
              f"{goal} ms after {row['trials_to_5pct']} trials, at it after {row['trials_to_match']}")
        print(f"    curve (trials: ms): {marks}")


if __name__ == "__main__":
    main()
