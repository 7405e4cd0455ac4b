"""Tuning-database overhead per trial: commit a measured batch, resume a model's history, find each
task's best — on a real SQLite file already holding N records — next to what a trial costs to
build and to time (from a real tune's records, with --db; timing excludes the worker's checks).

    python benchmarks/database.py [--records 20000] [--batch 16] [--db tuning.db] [--json] [--quick]

`--json` prints one object: `records_in_file`, `batch`, `commit_ms_per_trial`, `history_ms`,
`history_records`, `best_ms_per_task` (with --db also `build_s_per_trial`, `timed_s_per_trial`).
`--quick` is a smoke run on a file of 1000 records.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx

from autosched.database import Database, best, history
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.measure import ErrorKind, MeasureInput, MeasureResult
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.templates import get_template
from autosched.zoo import mlp


def batches(task, target, n, size, t0):
    space = get_template(task.op, target.kind).space(task, target)
    for b in range(0, n, size):
        yield [(MeasureInput(task, target, space.get(i % space.size)),
                MeasureResult((1e-3 + i * 1e-9,), ErrorKind.NO_ERROR, "", 0.1, t0 + i)) for i in range(b, b + size)]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20000, help="records in the file before timing")
    p.add_argument("--batch", type=int, default=16, help="trials per committed batch (the tuner's batch)")
    p.add_argument("--db", type=Path, help="a real tune's database: its median build and run seconds per trial")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="smoke run: 1000 records in the file")
    args = p.parse_args(argv)
    records = 1000 if args.quick else args.records
    target = Target.parse("llvm")
    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(mlp(), Path(tmp) / "mlp.onnx")
        tasks = extract_tasks(optimize(load_onnx(Path(tmp) / "mlp.onnx"))).tasks
        db = Database(Path(tmp) / "bench.db")
        for batch in batches(tasks[0], target, records, 512, 0.0):
            db.commit(batch)
        commits = []
        for batch in batches(tasks[1], target, 50 * args.batch, args.batch, 1e9):
            start = time.perf_counter()
            db.commit(batch)
            commits.append(time.perf_counter() - start)
        start = time.perf_counter()
        found = history(db, tasks, target)
        history_s = time.perf_counter() - start
        start = time.perf_counter()
        for task in tasks:
            best(db, task, target)
        best_s = time.perf_counter() - start
    result = {"records_in_file": records + 50 * args.batch, "batch": args.batch,
              "commit_ms_per_trial": round(1e3 * statistics.median(commits) / args.batch, 4),
              "history_ms": round(1e3 * history_s, 1), "history_records": sum(map(len, found.values())),
              "best_ms_per_task": round(1e3 * best_s / len(tasks), 2)}
    if args.db:
        rows = [s for s in Database(args.db).stored() if s.result.ok]
        result["build_s_per_trial"] = round(statistics.median(s.result.build_s for s in rows), 4)
        result["timed_s_per_trial"] = round(statistics.median(sum(s.result.costs) for s in rows), 5)  # repeats only
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:22} {value}")
    return result


if __name__ == "__main__":
    sys.exit(main() and 0)
