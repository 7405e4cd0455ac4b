"""Whole-model latency of autosched's builds against onnxruntime, for the zoo models.

    python benchmarks/models.py [--json] [--quick] [--threads 2] [--runs 30] [--models mlp,bert_layer]
                                [--db tuning.db]

Each model is built with default schedules (and, with --db, once more with the database's best
schedules), checked against onnxruntime, then timed in alternating blocks with it (same inputs, same
thread count); medians are compared. The tuned build is timed in the same run, so its ratio
to onnxruntime and its speedup over the untuned build come from one machine state. Per model,
`--json` gives `autosched_ms`, `onnxruntime_ms`, `ratio`, `tasks`, `kernel_calls` and
`matches_onnxruntime` (with --db also `tuned_ms`, `tuned_ratio`, `speedup_vs_untuned`, `tuned_tasks`);
`--quick` is a smoke run (the MLP alone unless --models says otherwise, 3 runs).
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from autosched import zoo
from autosched.compile.evaluate import Latency, compare, latency, onnxruntime_session, sample_inputs
from autosched.compile.model import build_model
from autosched.database import Database, TunedSchedules
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks


def timed(library: Path, session, feeds: dict, threads: int, runs: int) -> tuple[Latency, bool]:
    model = load_model(library)
    model.set_num_threads(threads)
    try:
        ok = all(d.ok for d in compare(model, session, feeds, rtol=1e-3, atol=1e-4))
        return latency(model, session, feeds, runs=runs), ok
    finally:
        model.close()


def bench_model(name: str, workdir: Path, threads: int, runs: int, db: Database | None) -> dict:
    path = workdir / f"{name}.onnx"
    graph = load_onnx(path)
    tasks = extract_tasks(optimize(graph, Target.parse("llvm").layout_lanes))
    session = onnxruntime_session(path, threads)
    feeds = sample_inputs(graph, 0)
    lat, ok = timed(build_model(graph, workdir / f"{name}.so").library, session, feeds, threads, runs)
    out = {"autosched_ms": round(lat.autosched_ms, 3), "onnxruntime_ms": round(lat.onnxruntime_ms, 3),
           "ratio": round(lat.ratio, 3), "tasks": len(tasks.tasks), "kernel_calls": len(tasks.groups),
           "matches_onnxruntime": ok}
    if db is not None:
        schedules = TunedSchedules(db)
        library = build_model(graph, workdir / f"{name}-tuned.so", schedule_for=schedules).library
        tuned, tuned_ok = timed(library, session, feeds, threads, runs)
        out.update({"tuned_ms": round(tuned.autosched_ms, 3), "tuned_ratio": round(tuned.ratio, 3),
                    "speedup_vs_untuned": round(lat.autosched_ms / tuned.autosched_ms, 3),
                    "tuned_tasks": len(set(schedules.used)), "matches_onnxruntime": ok and tuned_ok})
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--models", help="comma-separated zoo model names (default: all of them)")
    p.add_argument("--db", type=Path, metavar="PATH", help="tuning database: also build with its best schedules")
    p.add_argument("--quick", action="store_true", help="smoke run: the MLP (or --models), 3 runs")
    args = p.parse_args(argv)
    names = (args.models or ("mlp" if args.quick else ",".join(zoo.MODELS))).split(",")
    runs = 3 if args.quick else args.runs
    results = {}
    db = Database(args.db) if args.db else None
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        zoo.save_zoo(Path(tmp))
        for name in names:
            results[name] = bench_model(name, Path(tmp), args.threads, runs, db)
    if args.json:
        print(json.dumps(results))
    else:
        print(f"threads: {args.threads}, runs: {runs} (medians, alternating blocks)")
        print(f"{'model':14} {'autosched ms':>13} {'onnxruntime ms':>15} {'ratio':>7} {'tasks':>6} {'calls':>6}  check")
        for name, r in results.items():
            print(f"{name:14} {r['autosched_ms']:13.3f} {r['onnxruntime_ms']:15.3f} {r['ratio']:7.3f} "
                  f"{r['tasks']:6d} {r['kernel_calls']:6d}  {'ok' if r['matches_onnxruntime'] else 'MISMATCH'}")
            if "tuned_ms" in r:
                print(f"{'  tuned':14} {r['tuned_ms']:13.3f} {'':15} {r['tuned_ratio']:7.3f} {r['tuned_tasks']:6d} "
                      f"{'':6}  {r['speedup_vs_untuned']:.2f}x faster than untuned")
    return results


if __name__ == "__main__":
    main()
