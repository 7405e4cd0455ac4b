"""Shipped records against the default schedules in the model, kernel by kernel: which still pay.

    python benchmarks/shipped.py [--models resnet18,mobilenet_v2] [--threads N] [--rounds 40]
                                 [--repeats 3] [--threshold 0.95] [--write PATH] [--json] [--quick]

The records in `tuning_logs/` are the best of tuning runs, timed alone with their data warm and
chosen against the default schedules of their day. The defaults have moved since, and a kernel's
time in the model is not its time alone (issue 18), so a shipped record can make a first build
slower than no record at all. For each zoo model (`--models`, default all), the build from the
shipped records and the untuned build are loaded together and profiled in turn, `--rounds`
rounds of 10 runs each (`autosched.model_check.kernel_seconds`: the host's drift meets both
alike), `--repeats` times; per task, the median over the repeats of its kernel's time with the
record over its time without. `--write PATH` writes the shipped file of this host's ISA class
(`tuning_logs/zoo-<isa>.jsonl`) keeping only the records whose ratio is below `--threshold`:
records of tasks that none of the models checked has are left out too, so run it on the whole
zoo before replacing the file. `--quick` is a smoke run: the MLP, 2 rounds, 1 repeat.

`--json` prints one object: `threads`, `isa`, `threshold`, `models` (per model `untuned_ms` and
`shipped_ms`, the weighted sums of the kernels' times, and `tasks`: per task `op`, `shapes`,
`weight`, `index`, `untuned_ms`, `shipped_ms`, `ratios`, `ratio`, `keep`), `kept` and `dropped`.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from autosched import zoo
from autosched.compile.evaluate import sample_inputs
from autosched.compile.model import build_model, default_kernel
from autosched.database import Database, TunedSchedules, shipped_database, shipped_dir
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize_for
from autosched.model_check import kernel_seconds
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import extract_tasks


def check_model(path: Path, workdir: Path, target: Target, threads: int, rounds: int, repeats: int) -> dict:
    """Per task that a shipped record schedules: its kernel's time with the record and without."""
    graph = load_onnx(path)
    tasks = {t.key: t for t in extract_tasks(optimize_for(graph, target)).tasks}
    schedules = TunedSchedules(Database(f"sqlite:///{workdir / 'empty.db'}"), shipped_database())
    models = []
    try:
        for name, schedule_for in (("untuned", default_kernel), ("shipped", schedules)):
            model = load_model(build_model(graph, workdir / f"{path.stem}-{name}.so", target, schedule_for).library)
            model.set_num_threads(threads)
            models.append(model)
        feeds = sample_inputs(graph, 0)
        times = [kernel_seconds(feeds, models, rounds, runs=10) for _ in range(repeats)]
    finally:
        for model in models:
            model.close()
    rows = {}
    for key, found in schedules.used.items():
        if key not in tasks or key not in times[0][0]:
            continue
        ratios = [shipped[key] / untuned[key] for untuned, shipped in times]
        rows[key] = {"op": tasks[key].op, "shapes": [list(s) for s in tasks[key].shapes], "weight": tasks[key].weight,
                     "index": found.config.index,
                     "untuned_ms": round(1e3 * float(np.median([u[key] for u, _ in times])), 4),
                     "shipped_ms": round(1e3 * float(np.median([s[key] for _, s in times])), 4),
                     "ratios": [round(r, 3) for r in ratios], "ratio": round(float(np.median(ratios)), 3)}
    return {"untuned_ms": round(sum(r["weight"] * r["untuned_ms"] for r in rows.values()), 3),
            "shipped_ms": round(sum(r["weight"] * r["shipped_ms"] for r in rows.values()), 3), "tasks": rows}


def kept_lines(source: Path, keep: dict[str, int]) -> list[str]:
    """The lines of `source` whose record is the one kept for its task (task key -> config index)."""
    lines: list[str] = []
    for line in (source.read_text().splitlines() if source.is_file() else ()):
        record = json.loads(line)
        if keep.get(record["task"]) == record["config"]["index"]:
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated zoo model names (default: the zoo)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threshold", type=float, default=0.95, help="keep a record whose ratio is below this")
    p.add_argument("--write", type=Path, metavar="PATH", help="write the records kept, as JSON lines")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: the MLP, 2 rounds, 1 repeat")
    args = p.parse_args(argv)
    names = (args.models or ("mlp" if args.quick else ",".join(zoo.MODELS))).split(",")
    rounds, repeats = (2, 1) if args.quick else (args.rounds, args.repeats)
    target = Target.parse("llvm")
    out: dict = {"threads": args.threads, "isa": target.isa, "threshold": args.threshold, "models": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-shipped-") as tmp:
        workdir = Path(tmp)
        for path in zoo.save_zoo(workdir, names):
            out["models"][path.stem] = check_model(path, workdir, target, args.threads, rounds, repeats)
    keep: dict[str, int] = {}
    for model in out["models"].values():
        for key, row in model["tasks"].items():
            row["keep"] = row["ratio"] < args.threshold
            if row["keep"]:
                keep[key] = row["index"]
    rows = [r for m in out["models"].values() for r in m["tasks"].values()]
    out["kept"], out["dropped"] = sum(r["keep"] for r in rows), sum(not r["keep"] for r in rows)
    for model in out["models"].values():  # task keys served to find the records; the rows say which task
        model["tasks"] = list(model["tasks"].values())
    if args.write is not None:
        out["written"] = write_kept(args.write, keep, target.isa)
    _report(out, args.json)
    return out


def write_kept(path: Path, keep: dict[str, int], isa: str) -> int:
    """Write the records kept of the shipped file of `isa` to `path`; how many."""
    directory = shipped_dir()
    if directory is None:
        raise SystemExit("error: no shipped records to prune (no tuning_logs/ directory)")
    lines = kept_lines(directory / f"zoo-{isa}.jsonl", keep)
    path.write_text("".join(f"{line}\n" for line in lines))
    return len(lines)


def _report(out: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(out))
        return
    print(f"{out['isa']}, {out['threads']} threads: each task's kernel with its shipped record over without it "
          f"(medians of repeats), kept below {out['threshold']}")
    for name, model in out["models"].items():
        print(f"{name}: untuned {model['untuned_ms']:.3f} ms, shipped {model['shipped_ms']:.3f} ms (kernels, weighted)")
        for r in model["tasks"]:
            print(f"  {r['op']:<10} {str(r['shapes'][:2]):<48} x{r['weight']}  #{r['index']:<7} "
                  f"{r['untuned_ms']:8.4f} {r['shipped_ms']:8.4f}  {r['ratio']:.3f} {'keep' if r['keep'] else 'drop'}")
    print(f"kept {out['kept']}, dropped {out['dropped']}" + (f"; {out['written']} records written" if "written" in out else ""))


if __name__ == "__main__":
    main()
