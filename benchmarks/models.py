"""Whole-model latency of autosched's builds against onnxruntime, for the zoo models.

    python benchmarks/models.py [--json] [--quick] [--threads 2] [--runs 30] [--models mlp,bert_layer,path/to/model.onnx]
                                [--db tuning.db] [--baseline ../autosched-old]

Each model is built with default schedules (and, with --db, once more with the database's best
schedules), checked against onnxruntime, then timed in alternating blocks of 5 runs with it (same
inputs, same thread count); medians are compared, and two builds by the median over rounds of
their blocks' ratio (`paired_ratio`), which a phase change of the host between rounds leaves
alone. The tuned build is timed in the same run, so its ratio to onnxruntime and its speedup
over the untuned build come from one machine state. Per model,
`--json` gives `autosched_ms`, `onnxruntime_ms`, `ratio`, `tasks`, `kernel_calls` and
`matches_onnxruntime` (with --db also `tuned_ms`, `tuned_ratio`, `speedup_vs_untuned`, `tuned_verdict`:
the tuned build "faster", "slower", "within noise" or "too few rounds" (`paired_verdict`), and
`tuned_tasks`).
With `--baseline DIR` (another checkout of autosched, e.g. a `git worktree` of an older commit)
that checkout's untuned build is timed in the same alternation too (`baseline_ms`,
`baseline_ratio`, `speedup_vs_baseline`, `baseline_verdict`: this checkout's untuned build against
the baseline's, as `tuned_verdict`): a change to the defaults is judged against the code
before it in one machine state, not against a figure from another hour of a shared host.
`--quick` is a smoke run (the MLP alone unless --models says otherwise, 3 runs).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autosched import zoo
from autosched.compile.evaluate import (
    compare,
    joined,
    latency_rounds,
    onnxruntime_session,
    paired_interval,
    paired_ratio,
    paired_verdict,
    sample_inputs,
)
from autosched.compile.model import build_model
from autosched.database import Database, TunedSchedules
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize_for
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks

#: each side's timed runs last at least this long (`alternate`'s min_seconds): a sub-millisecond
#: block's 20-30 runs alone are a few milliseconds of timing
MIN_SECONDS = 0.25
#: runs per block: 20 runs make four rounds, so that the median of the rounds' ratios
#: (`paired_ratio`) leaves out a round in which the host changed phase
BLOCK = 5


@dataclass(frozen=True)
class Timed:
    """Builds and onnxruntime timed in one alternation."""

    ms: list[float]           # each build's median
    onnxruntime_ms: float
    oks: list[bool]           # each build's outputs match onnxruntime's
    rounds: list              # `alternate_rounds`: per round, per build and onnxruntime last, the block's seconds

    def ratio(self, a: int, b: int) -> float:
        """Build `a`'s time over build `b`'s, round by round (`paired_ratio`)."""
        return paired_ratio(self.rounds, a, b)

    def interval(self, a: int, b: int) -> tuple[float, float]:
        """The 95% interval of `ratio(a, b)` (`paired_interval`)."""
        return paired_interval(self.rounds, a, b)

    def verdict(self, a: int, b: int) -> str:
        """Whether build `a` is faster or slower than build `b` beyond noise (`paired_verdict`)."""
        return paired_verdict(self.rounds, a, b)


def timed_together(libraries: Sequence[Path], session, feeds: dict, threads: int,
                   runs: int, min_seconds: float = 0.0) -> Timed:
    """Each built library and onnxruntime, timed in one alternation of blocks of `BLOCK` runs (so
    a tuned and an untuned build see the same drift of a shared machine), and whether each
    matches onnxruntime."""
    models = [load_model(lib) for lib in libraries]
    try:
        for model in models:
            model.set_num_threads(threads)
        oks = [all(d.ok for d in compare(model, session, feeds, rtol=1e-3, atol=1e-4)) for model in models]
        rounds = latency_rounds(models, session, feeds, runs=runs, block=BLOCK, min_seconds=min_seconds)
        *ours, theirs = joined(rounds, len(models) + 1)
        return Timed([1e3 * float(np.median(t)) for t in ours], 1e3 * float(np.median(theirs)), oks, rounds)
    finally:
        for model in models:
            model.close()


def baseline_build(checkout: Path, model: Path, out: Path) -> Path:
    """`model` built untuned by the autosched of another checkout, in its own process: its CLI's
    build from an empty database, without shipped records or substitutions, as `build_model` here."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "autosched.cli", "build", str(model), "--target", "llvm", "-o", str(out),
           "--no-shipped", "--no-substitutions", "--db", str(out.parent / "empty.db")]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    env.pop("AUTOSCHED_DB", None)
    done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: the baseline checkout {checkout} could not build {model.name}: "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    return out


def bench_model(name: str, path: Path, workdir: Path, threads: int, runs: int, db: Database | None,
                baseline: Path | None = None, min_seconds: float = 0.0) -> dict:
    graph = load_onnx(path)
    tasks = extract_tasks(optimize_for(graph, Target.parse("llvm")))
    session = onnxruntime_session(path, threads)
    feeds = sample_inputs(graph, 0)
    libraries = [build_model(graph, workdir / f"{name}.so").library]
    if db is not None:  # the tuned build timed in the same alternation as the untuned one
        schedules = TunedSchedules(db)
        libraries.append(build_model(graph, workdir / f"{name}-tuned.so", schedule_for=schedules).library)
    if baseline is not None:
        libraries.append(baseline_build(baseline, path, workdir / "baseline" / f"{name}.so"))
    timed = timed_together(libraries, session, feeds, threads, runs, min_seconds)
    ms, ort_ms = timed.ms, timed.onnxruntime_ms
    out = {"autosched_ms": round(ms[0], 3), "onnxruntime_ms": round(ort_ms, 3), "ratio": round(ms[0] / ort_ms, 3),
           "tasks": len(tasks.tasks), "kernel_calls": len(tasks.groups), "matches_onnxruntime": all(timed.oks)}
    if db is not None:
        out.update({"tuned_ms": round(ms[1], 3), "tuned_ratio": round(ms[1] / ort_ms, 3),
                    "speedup_vs_untuned": round(timed.ratio(0, 1), 3),
                    "tuned_verdict": timed.verdict(1, 0), "tuned_tasks": len(set(schedules.used))})
    if baseline is not None:
        last = len(ms) - 1
        out.update({"baseline_ms": round(ms[-1], 3), "baseline_ratio": round(ms[-1] / ort_ms, 3),
                    "speedup_vs_baseline": round(timed.ratio(last, 0), 3),
                    "baseline_verdict": timed.verdict(0, last)})
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--min-seconds", type=float, default=MIN_SECONDS,
                   help="more runs (in as many blocks) until each side's timed runs last this long")
    p.add_argument("--models", help="comma-separated model names: the zoo's, llama_block, llama_decode, resnext_block, squeezenet, vit_block, "
                                    "autosched/zoo_blocks.py's, or paths of .onnx files (default: the zoo)")
    p.add_argument("--db", type=Path, metavar="PATH", help="tuning database: also build with its best schedules")
    p.add_argument("--baseline", type=Path, metavar="DIR",
                   help="another checkout of autosched: its untuned build timed in the same alternation")
    p.add_argument("--quick", action="store_true", help="smoke run: the MLP (or --models), 3 runs")
    args = p.parse_args(argv)
    requested = (args.models or ("mlp" if args.quick else ",".join(zoo.MODELS))).split(",")
    files = {Path(n).stem: Path(n) for n in requested if n.endswith(".onnx")}
    names = [Path(n).stem if n.endswith(".onnx") else n for n in requested]
    runs = 3 if args.quick else args.runs
    min_seconds = 0.0 if args.quick else args.min_seconds
    results = {}
    db = Database(args.db) if args.db else None
    if args.baseline is not None and not (args.baseline / "autosched" / "cli").is_dir():
        raise SystemExit(f"error: --baseline {args.baseline} is not a checkout of autosched (no autosched/cli)")
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        try:
            if any(n not in files for n in names):
                zoo.save_zoo(Path(tmp), [n for n in names if n not in files])
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            raise SystemExit(f"error: no model file {missing[0]}")
        for name in names:  # a file is read where it lies: an export's external weights sit beside it
            path = files.get(name, Path(tmp) / f"{name}.onnx")
            results[name] = bench_model(name, path, Path(tmp), args.threads, runs, db, args.baseline, min_seconds)
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
                      f"{'':6}  {r['speedup_vs_untuned']:.2f}x faster than untuned "
                      f"({r['tuned_verdict']})")
            if "baseline_ms" in r:
                print(f"{'  baseline':14} {r['baseline_ms']:13.3f} {'':15} {r['baseline_ratio']:7.3f} {'':6} "
                      f"{'':6}  untuned {r['speedup_vs_baseline']:.2f}x faster than the baseline's "
                      f"({r['baseline_verdict']})")
    return results


if __name__ == "__main__":
    main()
