"""Where a model's time goes, task by task: the op library's schedule, the untuned build's, and the tuned one.

    python benchmarks/tasks.py MODEL.onnx [--db tuning.db] [--threads 2] [--target llvm] [--json] [--quick]

Each task's kernel is compiled alone, as the build compiles it (stages that read only weights,
such as a dense layer's packed B, computed once beforehand), and timed on the task's seeded
inputs (best of rounds, warm caches, the same thread count for all). Columns: `library` is the op library's default
schedule, `untuned` what `autosched build` uses without tuning records (a template's fallback config
where it has one, else the library's), `tuned` the database's best config (blank without one).
Totals weigh each task by how often the model runs it, so they compare with whole-model
latency minus the executor's own work. A second table gives each op kind's share of the
untuned and tuned totals (depthwise convolutions apart from dense ones). `--json` prints one
object: `model`, `threads`, `target`, `tasks` (per task `op`, `kind`, `shapes`, `weight`, `library_ms`,
`untuned_ms`, with --db `tuned_ms`), `totals` and `share_by_op`. `--quick` is a smoke run: one short
timing round per kernel, and without MODEL the zoo MLP.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_seconds  # noqa: E402

from autosched import zoo  # noqa: E402
from autosched.compile.model import default_kernel, kernel_as_built, library_kernel, weight_positions  # noqa: E402
from autosched.database import Database, TunedSchedules, best  # noqa: E402
from autosched.frontend.onnx import import_model, load_onnx  # noqa: E402
from autosched.graph.passes import optimize_for  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import Task, extract_tasks  # noqa: E402


def kernel_ms(task: Task, schedule, args, threads: int, consts: tuple[int, ...], target: Target,
              quick: bool = False) -> float:
    """The kernel as the build runs it: stages reading only the task's weights (`consts`) are
    computed once beforehand, not timed (a dense layer's packed weights)."""
    inputs = task.random_inputs(0)
    kern, folded = kernel_as_built(schedule, args, consts, target, inputs)
    kern.set_num_threads(threads)
    outs = [np.empty(shape, dtype) for shape, dtype in zip(task.out_shapes, task.out_dtypes)]
    bound = kern.bind(inputs + outs + folded)
    run = lambda: kern.run(bound)  # noqa: E731
    return 1e3 * (best_seconds(run, min_s=0.01, rounds=1) if quick else best_seconds(run))


def op_kind(task: Task) -> str:
    groups = dict(task.attrs).get("group", 1)
    return f"{task.op} depthwise" if task.op.startswith("Conv") and groups != 1 else task.op


def shares(rows: list[dict], column: str) -> dict[str, float]:
    """Per op kind, its share (0..1) of the weighted total of `column` (untuned where missing)."""
    spent: dict[str, float] = {}
    for r in rows:
        spent[r["kind"]] = spent.get(r["kind"], 0.0) + r["weight"] * r.get(column, r["untuned_ms"])
    total = sum(spent.values())
    return {k: round(v / total, 4) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, nargs="?", help="the ONNX model (with --quick, default: the zoo MLP)")
    p.add_argument("--db", type=Path, metavar="PATH", help="tuning database whose best configs make the tuned column")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="llvm", help="the build's target (its layout planning and schedules)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: one short timing round per kernel")
    args = p.parse_args(argv)
    if args.model is None and not args.quick:
        p.error("the model is required (or --quick, which times the zoo MLP)")
    target = Target.parse(args.target)
    source = load_onnx(args.model) if args.model else import_model(zoo.mlp(), source="mlp")
    name = args.model.name if args.model else "mlp.onnx"
    graph = optimize_for(source, target)
    taskset = extract_tasks(graph)
    tasks, weights = taskset.tasks, weight_positions(graph, taskset)
    db = Database(args.db) if args.db else None
    tuned = TunedSchedules(db) if db else None
    rows = []
    for index, task in enumerate(tasks):
        def timed(schedule_and_args, task=task, consts=weights[index]) -> float:
            return kernel_ms(task, *schedule_and_args, args.threads, consts, target, args.quick)
        row = {"op": task.op, "kind": op_kind(task), "shapes": [list(s) for s in task.shapes], "weight": task.weight,
               "library_ms": timed(library_kernel(task, target)), "untuned_ms": timed(default_kernel(task, target))}
        if tuned is not None and best(db, task, target) is not None:
            row["tuned_ms"] = timed(tuned(task, target))
        rows.append(row)
    totals = {col: round(sum(r["weight"] * r.get(col, r["untuned_ms"]) for r in rows), 3)
              for col in ("library_ms", "untuned_ms", "tuned_ms")}
    by_kind = {col: shares(rows, col) for col in ("untuned_ms", "tuned_ms")}
    result = {"model": name, "threads": args.threads, "target": str(target), "tasks": rows,
              "totals": totals, "share_by_op": by_kind}
    if args.json:
        print(json.dumps(result))
        return result
    print(f"{name}: kernel ms per call, {args.threads} threads (tuned: the database's best; "
          "tasks without a tuned config count as untuned in the total)")
    print(f"{'op':10} {'shapes':44} {'weight':>6} {'library':>9} {'untuned':>9} {'tuned':>9}")
    for r in rows:
        tuned_ms = f"{r['tuned_ms']:9.3f}" if "tuned_ms" in r else f"{'':9}"
        shapes = " ".join("x".join(map(str, s)) for s in r["shapes"][:2])
        print(f"{r['op']:10} {shapes:44} {r['weight']:6d} {r['library_ms']:9.3f} {r['untuned_ms']:9.3f} {tuned_ms}")
    print(f"{'total (weighted)':61} {totals['library_ms']:9.3f} {totals['untuned_ms']:9.3f} {totals['tuned_ms']:9.3f}")
    print(f"\n{'op kind':24} {'untuned share':>14} {'tuned share':>12}")
    for kind, share in by_kind["untuned_ms"].items():
        print(f"{kind:24} {100 * share:13.1f}% {100 * by_kind['tuned_ms'][kind]:11.1f}%")
    return result


if __name__ == "__main__":
    main()
