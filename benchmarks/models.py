"""Whole-model latency of autosched's untuned build against onnxruntime, for the zoo models.

    python benchmarks/models.py [--json] [--threads 2] [--runs 30] [--models mlp,bert_layer]

Each model is built with default schedules, checked against onnxruntime, then timed
interleaved with it (same inputs, same thread count); medians are compared.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from autosched import zoo
from autosched.build import build_model
from autosched.evaluate import compare, latency, onnxruntime_session, sample_inputs
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.runtime import load_model
from autosched.task import extract_tasks


def bench_model(name: str, workdir: Path, threads: int, runs: int) -> dict:
    path = workdir / f"{name}.onnx"
    graph = load_onnx(path)
    tasks = extract_tasks(optimize(graph))
    model = load_model(build_model(graph, workdir / f"{name}.so").library)
    model.set_num_threads(threads)
    session = onnxruntime_session(path, threads)
    feeds = sample_inputs(graph, 0)
    ok = all(d.ok for d in compare(model, session, feeds, rtol=1e-3, atol=1e-4))
    lat = latency(model, session, feeds, runs=runs)
    model.close()
    return {"autosched_ms": round(lat.autosched_ms, 3), "onnxruntime_ms": round(lat.onnxruntime_ms, 3),
            "ratio": round(lat.ratio, 3), "tasks": len(tasks.tasks), "kernel_calls": len(tasks.groups),
            "matches_onnxruntime": ok}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--models", default=",".join(zoo.MODELS), help="comma-separated zoo model names")
    args = p.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        zoo.save_zoo(Path(tmp))
        for name in args.models.split(","):
            results[name] = bench_model(name, Path(tmp), args.threads, args.runs)
    if args.json:
        print(json.dumps(results))
    else:
        print(f"threads: {args.threads}, runs: {args.runs} (medians, interleaved)")
        print(f"{'model':14} {'autosched ms':>13} {'onnxruntime ms':>15} {'ratio':>7} {'tasks':>6} {'calls':>6}  check")
        for name, r in results.items():
            print(f"{name:14} {r['autosched_ms']:13.3f} {r['onnxruntime_ms']:15.3f} {r['ratio']:7.3f} "
                  f"{r['tasks']:6d} {r['kernel_calls']:6d}  {'ok' if r['matches_onnxruntime'] else 'MISMATCH'}")
    return results


if __name__ == "__main__":
    main()
