"""Tuning curves of whole models: tune from an empty database to each checkpoint, then time
the tuned build, the untuned build and onnxruntime in one alternation (a shared machine's drift
falls on all three alike); and the build from the shipped records alone (a first build, no
tuning). Every build is `autosched build`'s, of the graph the substitutions choose with the
records at hand, so a rewritten graph's tuned tasks are the ones built.

    python benchmarks/tuning.py [--models mlp,resnet18,my.onnx] [--checkpoints 250,500,1000] [--shipped]
                                [--scheduler costliest] [--caches cold] [--threads 2] [--runs 20] [--db-dir DIR]
                                [--json] [--quick]

Per checkpoint: the tuning wall time so far (the model check `tune` ends with included), the
estimated model latency (Σ weight × each task's best measured time, what the task scheduler
minimizes), the latency model's estimate of the build (records, other kernels in the model,
executor: `autosched.database.model_times`), what the tune's model check timed, and the
measured ratios to onnxruntime. Each model gets its own database file in --db-dir (kept, so the figures can be
re-examined with `autosched report`); an existing file is refused, since the curve must start
from nothing. By default nothing shipped is used (`tune --no-shipped`): the curve starts from
nothing and the tuned build's untuned tasks run their defaults; `--shipped` tunes and builds as
a user's first tune does, cost models trained on the shipped training logs and tasks without
records built from the shipped records. Comparing `--scheduler costliest` and `--scheduler gradient` at equal trials is
issue 9's scheduler comparison; `--caches` (warm, cold, flushed or auto) is the cache state
`tune` times candidates in, so curves of two modes compare which ranks configs as the model
runs them on this host. `--json` prints one object: `threads`, `runs`, `scheduler`, `caches`, `shipped` and per
model `untuned` and `shipped` (`ms`, `ratio`, ...) and `checkpoints` (per checkpoint `trials`,
`tune_wall_s`, `estimated_ms`, `model_estimate_ms`, `check` (with `kernels`: tasks the check timed kernel by
kernel in the model, `chosen` where a config beat the default there, `lost` configs), `tuned_ms`, `tuned_ratio`, `untuned_ms`, `untuned_ratio`,
`tuned_vs_untuned` (the tuned build's time over the untuned one's, the median over the alternation's
`rounds` of their blocks' ratio: `paired_ratio`), `tuned_vs_untuned_interval` (the 95% interval of
that median, whatever the noise's law: `paired_interval`) and `verdict` (`paired_verdict`:
"faster" or "slower" only where the interval excludes 1, "within noise", or "too few rounds"
below 6 rounds of 5 runs: a checkpoint is slower than the untuned build only where it says
"slower"), `onnxruntime_ms`, `ok`, `same_as_untuned`: the
tuned build is the untuned one byte for byte, so its ratio to it is the host's noise). `--quick` is a smoke run: the MLP (unless --models), checkpoints 4 and 8, 3 runs.
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import tempfile
import time
from pathlib import Path

from models import MIN_SECONDS, timed_together  # noqa: E402  (benchmarks/ is the script's directory)

import autosched
from autosched import zoo
from autosched.api import build, model_tasks
from autosched.compile.evaluate import onnxruntime_session, sample_inputs
from autosched.compile.model import ModelFiles
from autosched.database import Database, TunedSchedules, best, shipped_database
from autosched.database.model_times import estimate
from autosched.frontend.onnx import load_onnx
from autosched.measure.caches import CACHE_CHOICES
from autosched.target import Target
from autosched.task_scheduler import tunable


def estimated_ms(db: Database, tasks, target: Target, fallback: Database | None) -> tuple[float | None, float]:
    """(Σ weight × best over the model's tunable tasks, or None while one has no valid record;
    the latency model's estimate of the build, whose tasks without records fall back to
    `fallback`'s: records + other kernels in the model + executor)."""
    schedules = TunedSchedules(db, fallback)
    whole = round(estimate(db, tasks, target, {t.key: schedules.choose(t, target) for t in tasks}).total_ms, 3)
    total = 0.0
    for task in tunable(tasks, target)[0]:
        found = best(db, task, target)
        if found is None:
            return None, whole
        total += task.weight * found.cost
    return round(total * 1e3, 3), whole


def curve(name: str, path: Path, workdir: Path, db_path: Path, checkpoints: list[int], scheduler: str,
          threads: int, runs: int, shipped: bool, caches: str = "warm", min_seconds: float = 0.0) -> dict:
    target = Target.parse("llvm")
    session = onnxruntime_session(path, threads)
    feeds = sample_inputs(load_onnx(path), 0)
    out: dict = {"checkpoints": []}
    # every build is `autosched build`'s: the graph the substitutions choose with the records at hand
    empty = Database("sqlite://")
    untuned = build(path, target, db=empty, output=workdir / f"{name}.so", shipped=False)
    first = build(path, target, db=empty, output=workdir / f"{name}-shipped.so")  # a first build: shipped records
    timed = timed_together([untuned.files.library, first.files.library], session, feeds, threads, runs, min_seconds)
    (untuned_ms, shipped_ms), ort_ms, (ok, shipped_ok) = timed.ms, timed.onnxruntime_ms, timed.oks
    out["untuned"] = {"ms": round(untuned_ms, 3), "onnxruntime_ms": round(ort_ms, 3), "ratio": round(untuned_ms / ort_ms, 3),
                      "ok": ok}
    out["shipped"] = {"ms": round(shipped_ms, 3), "ratio": round(shipped_ms / ort_ms, 3),
                      "tasks_from_shipped": len(first.shipped), "tasks": first.tasks, "ok": shipped_ok}
    done, wall = 0, 0.0
    with Database(db_path) as db:
        for trials in checkpoints:
            start = time.perf_counter()
            check = autosched.tune(path, target, trials - done, db=db, scheduler=scheduler, shipped=shipped,
                                  caches=caches).model_check
            wall += time.perf_counter() - start
            done = trials
            tuned = build(path, target, db=db, output=workdir / f"{name}-{trials}.so", shipped=shipped).files
            timed = timed_together([tuned.library, untuned.files.library], session, feeds, threads, runs, min_seconds)
            (tuned_ms, again_ms), ort_ms, (tuned_ok, again_ok) = timed.ms, timed.onnxruntime_ms, timed.oks
            _, tasks = model_tasks(path, target, db=db, shipped=shipped)
            records, whole = estimated_ms(db, tasks, target, shipped_database() if shipped else None)
            out["checkpoints"].append({
                "trials": trials, "tune_wall_s": round(wall, 1), "estimated_ms": records, "model_estimate_ms": whole,
                "check": None if check is None else {
                    "tuned_ms": round(check.tuned_ms, 3), "untuned_ms": round(check.untuned_ms, 3),
                    "first_tuned_ms": round(check.first_tuned_ms, 3), "declined": check.declined,
                    "kernels": {"judged": len(check.kernels), "chosen": sum(k.chosen is not None for k in check.kernels),
                                "chosen_not_fastest_alone": sum(k.chosen not in (None, 0) for k in check.kernels),
                                "lost": sum(v is False for k in check.kernels for v in k.verdicts)},
                    "tested": [{"op": v.op, "wins": v.wins, "with_ms": round(v.with_ms, 3),
                                "without_ms": round(v.without_ms, 3)} for v in check.tested]},
                "tuned_ms": round(tuned_ms, 3), "tuned_ratio": round(tuned_ms / ort_ms, 3),
                "untuned_ms": round(again_ms, 3), "untuned_ratio": round(again_ms / ort_ms, 3),
                "tuned_vs_untuned": round(timed.ratio(0, 1), 3), "rounds": len(timed.rounds),
                "tuned_vs_untuned_interval": [round(v, 3) for v in timed.interval(0, 1)],
                "verdict": timed.verdict(0, 1),
                "onnxruntime_ms": round(ort_ms, 3), "ok": tuned_ok and again_ok,
                "same_as_untuned": _same_build(tuned, untuned.files)})
    return out


def _same_build(a: ModelFiles, b: ModelFiles) -> bool:
    """Whether two builds are the same code and weights, byte for byte (gcc's output for one C
    source is): a checkpoint whose model check declined every tuned config builds the untuned
    model again, and its tuned / untuned ratio is then the host's noise between two timings of
    one build, not a result of tuning."""
    return all(filecmp.cmp(x, y, shallow=False) for x, y in ((a.library, b.library), (a.weights, b.weights)))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated model names: the zoo's, autosched/zoo.py's others "
                                    "(llama_block, resnext_block, squeezenet, vit_block, ...), autosched/zoo_blocks.py's, "
                                    "or paths of .onnx files (default: the zoo)")
    p.add_argument("--checkpoints", help="cumulative trial counts to stop and time at (default: 250,500,1000)")
    p.add_argument("--scheduler", default="gradient", choices=["costliest", "gradient"])
    p.add_argument("--caches", default="warm", choices=CACHE_CHOICES,
                   help="the cache state candidates are timed in (tune --caches)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--min-seconds", type=float, default=MIN_SECONDS,
                   help="more runs (in as many blocks) until each side's timed runs last this long")
    p.add_argument("--db-dir", type=Path, default=Path("tuning-curves"), help="one database per model, kept")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--shipped", action="store_true",
                   help="tune and build with what ships with autosched, as a user's first tune does: cost models "
                        "start trained on the shipped training logs, and tasks without records build from the "
                        "shipped records (default: neither, a curve from nothing)")
    p.add_argument("--quick", action="store_true", help="smoke run: the MLP, checkpoints 4 and 8, 3 runs")
    args = p.parse_args(argv)
    checkpoints = sorted(int(c) for c in (args.checkpoints or ("4,8" if args.quick else "250,500,1000")).split(","))
    requested = (args.models or ("mlp" if args.quick else ",".join(zoo.MODELS))).split(",")
    files = {Path(n).stem: Path(n) for n in requested if n.endswith(".onnx")}
    names = [Path(n).stem if n.endswith(".onnx") else n for n in requested]
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise SystemExit(f"error: no model file {missing[0]}")
    runs = 3 if args.quick else args.runs
    args.db_dir.mkdir(parents=True, exist_ok=True)
    mode = "" if args.caches == "warm" else f"-{args.caches}"
    dbs = {n: args.db_dir / f"{n}-{args.scheduler}{mode}.db" for n in names}
    taken = [str(d) for d in dbs.values() if d.exists()]
    if taken:
        raise SystemExit(f"error: {taken[0]} exists; a tuning curve starts from an empty database")
    results = {"threads": args.threads, "runs": runs, "scheduler": args.scheduler, "caches": args.caches,
               "shipped": args.shipped,
               "models": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-curve-") as tmp:
        try:
            zoo.save_zoo(Path(tmp), [n for n in names if n not in files])
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
        for name in names:  # a file is read where it lies: an export's external weights sit beside it
            path = files.get(name, Path(tmp) / f"{name}.onnx")
            results["models"][name] = r = curve(name, path, Path(tmp), dbs[name], checkpoints, args.scheduler,
                                                args.threads, runs, args.shipped, args.caches,
                                                0.0 if args.quick else args.min_seconds)
            if not args.json:
                _print(name, r)
    if args.json:
        print(json.dumps(results))
    return results


def _print(name: str, r: dict) -> None:
    u, s = r["untuned"], r["shipped"]
    print(f"{name}: untuned {u['ms']:.3f} ms, onnxruntime {u['onnxruntime_ms']:.3f} ms (ratio {u['ratio']:.3f}); "
          f"shipped records only {s['ms']:.3f} ms (ratio {s['ratio']:.3f}, {s['tasks_from_shipped']} of "
          f"{s['tasks']} tasks)")
    print(f"  {'trials':>6} {'tune s':>7} {'est. ms':>8} {'model est.':>10} {'tuned ms':>9} {'ratio':>6} {'untuned ms':>11} "
          f"{'ratio':>6} {'tuned/untuned':>13} {'95% interval':>13} {'verdict':>12} {'ORT ms':>7} {'kernel wins':>11}  check")
    for c in r["checkpoints"]:
        est = "-" if c["estimated_ms"] is None else f"{c['estimated_ms']:.3f}"
        print(f"  {c['trials']:6d} {c['tune_wall_s']:7.1f} {est:>8} {c['model_estimate_ms']:10.3f} {c['tuned_ms']:9.3f} "
              f"{c['tuned_ratio']:6.3f} "
              f"{c['untuned_ms']:11.3f} {c['untuned_ratio']:6.3f} {c['tuned_vs_untuned']:13.3f} "
              f"{'{:.3f}-{:.3f}'.format(*c['tuned_vs_untuned_interval']):>13} {c['verdict']:>12} {c['onnxruntime_ms']:7.3f} "
              f"{_kernel_wins(c):>11}  "
              f"{'ok' if c['ok'] else 'MISMATCH'}{', the untuned build' if c['same_as_untuned'] else ''}")


def _kernel_wins(checkpoint: dict) -> str:
    """Tasks whose config fastest in the model beat their default, of those the check judged."""
    kernels = (checkpoint["check"] or {}).get("kernels")
    return "-" if not kernels else f"{kernels['chosen']}/{kernels['judged']}"


if __name__ == "__main__":
    main()
