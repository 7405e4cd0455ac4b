"""Isolated against in-model times of the same configs: how well what a record measures ranks a
task's configs by what they cost in the built model (issue 18: measurements in the model's context).

    python benchmarks/in_model.py [MODEL.onnx] [--tasks 2] [--configs 8] [--threads 2] [--seed 0]
                                  [--json] [--quick]

For MODEL's `--tasks` tunable tasks with the largest share of its untuned build's time (from a
profile of that build), `--configs` configs each (the fallback and seeded random configs of the
task's space that build and run) are timed three ways:
- alone, as the tuner's runner records them, in each cache mode of `autosched.measure.caches`:
  warm (calls back to back), cold (twice the last-level cache flushed before each timed call,
  then the kernel's activations read back: what `tune --caches auto` picks for models whose
  weights exceed that cache) and flushed (the flush alone, TVM's cache flush);
- in the model: the model built with that config for the task and every other task on its
  default schedule, profiled (`Model.profile`: each call timed inside the run, median of 10 runs).
Per task: the four times per config and Spearman's rank correlation of each isolated column
with the in-model one (1: records order configs as the model does). `--json` prints one object:
`model`, `threads`, `llc_bytes`, `weight_bytes` and per task `op`, `shapes`, `weight`, `share`,
`configs` (per config `index`, `warm_ms`, `cold_ms`, `flushed_ms`, `in_model_ms`) and
`spearman_warm`, `spearman_cold`, `spearman_flushed`.
`--quick` is a smoke run: the zoo MLP, one task, three configs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from autosched import zoo
from autosched.compile.evaluate import sample_inputs
from autosched.compile.model import build_model, default_kernel
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize_for
from autosched.measure import MeasureInput, measure_with
from autosched.measure.caches import CACHE_MODES as MODES
from autosched.measure.caches import llc_bytes
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
from autosched.runtime import load_model
from autosched.target import Target
from autosched.task import Task, extract_tasks
from autosched.task_scheduler import tunable
from autosched.templates import get_template


def in_model_ms(graph, target: Target, task: Task, config, workdir: Path, name: str, threads: int) -> dict[str, float]:
    """Task key → one call's median ms in the model built with `config` for `task` (None: defaults)."""
    template = get_template(task.op, target.kind)

    def schedule_for(t: Task, tgt: Target):
        return template.apply(t, config, tgt) if config is not None and t.key == task.key else default_kernel(t, tgt)

    files = build_model(graph, workdir / f"{name}.so", target, schedule_for)
    model = load_model(files.library)
    model.set_num_threads(threads)
    calls = model.profile(sample_inputs(graph, 0), runs=10)
    keys = [t["key"] for t in model.manifest["tasks"]]
    model.close()
    per: dict[str, list[float]] = {}
    for c in calls:
        per.setdefault(keys[c.task], []).append(1e3 * c.seconds)
    return {k: float(np.mean(v)) for k, v in per.items()}


def isolated_ms(task: Task, target: Target, configs: list, threads: int, caches: str) -> list[float | None]:
    """Each config's median recorded time alone (None where it failed), as `tune` records it."""
    with LocalRunner(RunnerOptions(threads=threads, caches=caches)) as runner:
        results = measure_with(LocalBuilder(), runner)([MeasureInput(task, target, c) for c in configs])
    return [1e3 * float(np.median(r.costs)) if r.costs else None for r in results]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", type=Path, help="ONNX model (default: the zoo's ResNet-18; --quick: the MLP)")
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--configs", type=int, default=8)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: the zoo MLP, one task, three configs")
    args = p.parse_args(argv)
    n_tasks, n_configs = (1, 3) if args.quick else (args.tasks, args.configs)
    target = Target.parse("llvm")
    with tempfile.TemporaryDirectory(prefix="autosched-inmodel-") as tmp:
        workdir = Path(tmp)
        path = args.model
        if path is None:
            zoo.save_zoo(workdir)
            path = workdir / ("mlp.onnx" if args.quick else "resnet18.onnx")
        graph = load_onnx(path)
        tasks = tunable(extract_tasks(optimize_for(graph, target)).tasks, target)[0]
        untuned = in_model_ms(graph, target, tasks[0], None, workdir, "untuned", args.threads)
        total = sum(t.weight * untuned.get(t.key, 0.0) for t in tasks)
        ranked = sorted(tasks, key=lambda t: -t.weight * untuned.get(t.key, 0.0))[:n_tasks]
        out: dict = {"model": str(path.name), "threads": args.threads, "llc_bytes": llc_bytes(),
                     "weight_bytes": sum(a.nbytes for a in graph.constants.values()), "tasks": []}
        rng = random.Random(args.seed)
        for k, task in enumerate(ranked):
            template = get_template(task.op, target.kind)
            space = template.space(task, target)
            fallback = template.fallback(task, target)
            candidates = ([fallback] if fallback is not None else []) + [space.get(rng.randrange(len(space)))
                                                                         for _ in range(3 * n_configs)]
            warm = isolated_ms(task, target, candidates, args.threads, "warm")
            kept = [(c, w) for c, w in zip(candidates, warm) if w is not None][:n_configs]
            configs = [c for c, _ in kept]
            times = {"warm": [w for _, w in kept]}
            times.update({mode: isolated_ms(task, target, configs, args.threads, mode) for mode in MODES[1:]})
            rows = []
            for j, config in enumerate(configs):
                seen = in_model_ms(graph, target, task, config, workdir, f"t{k}c{j}", args.threads)[task.key]
                rows.append({"index": config.index, **{f"{m}_ms": None if times[m][j] is None else round(times[m][j], 4)
                                                       for m in MODES}, "in_model_ms": round(seen, 4)})
            out["tasks"].append({
                "op": task.op, "shapes": [list(s) for s in task.shapes], "weight": task.weight,
                "share": round(task.weight * untuned[task.key] / total, 3), "configs": rows,
                **{f"spearman_{m}": _spearman(rows, f"{m}_ms") for m in MODES}})
    if args.json:
        print(json.dumps(out))
    else:
        _print(out)
    return out


def _spearman(rows: list[dict], column: str) -> float | None:
    pairs = [(r[column], r["in_model_ms"]) for r in rows if r[column] is not None]
    if len(pairs) < 3:
        return None
    rho = spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic
    return None if np.isnan(rho) else round(float(rho), 3)


def _print(out: dict) -> None:
    print(f"{out['model']}: {out['threads']} threads, weights {out['weight_bytes'] / 2**20:.1f} MiB, last-level cache "
          f"{out['llc_bytes'] >> 20} MiB (cold and flushed: twice that written before each timed call)")
    for t in out["tasks"]:
        rho = ", ".join(f"{m} {t[f'spearman_{m}']}" for m in MODES)
        print(f"{t['op']} {t['shapes'][:2]} weight {t['weight']}, {100 * t['share']:.1f}% of the untuned build: "
              f"Spearman with in-model times: {rho}")
        print(f"  {'config':>8}" + "".join(f" {m + ' ms':>11}" for m in MODES) + f" {'in model ms':>12}")
        for r in t["configs"]:
            cells = "".join(f" {'-' if r[f'{m}_ms'] is None else format(r[f'{m}_ms'], '.4f'):>11}" for m in MODES)
            print(f"  {r['index']:>8}{cells} {r['in_model_ms']:12.4f}")


if __name__ == "__main__":
    main()
