"""Direct against Winograd convolution, per 3×3 stride-1 Conv task of a model (ResNet-18 by default).

    python benchmarks/winograd.py [MODEL.onnx] [--trials 24] [--threads 2] [--target llvm] [--json] [--quick]

For each eligible task, every kernel timed as a built model runs it, which is also how the tuner
times it (stages that read only weights, the direct algorithm's packing and Winograd's weight
transform alike, precomputed: `autosched.measure.fold`): `direct` is the direct algorithm's
fallback config (the untuned kernel before Winograd), `winograd` the fastest of `--trials`
random Winograd configs of the same template (algorithm winograd_2/4/6 where offered, channel blocks
where the template has them, GEMM tile and order, padding; the direct-only knobs stay at the
fallback's values), `untuned` the fallback config now (Winograd where its rule says so).
Kernels are compiled first, then timed in interleaved
rounds (best round kept), so a burst of load from another process hits every candidate alike;
same threads for all. With `--threads 1` the time is the thread's CPU time, which other
processes on the machine inflate far less than wall-clock time: on a shared 2-core machine a
2-thread kernel whose OpenMP barrier waits on a descheduled thread takes a whole time slice
(30 or 52 ms seen for 0.3 ms kernels, in every round of a task), so read 2-thread figures from
a quiet machine only. Without MODEL, the zoo's ResNet-18. `--json` prints one object: `model`,
`target`, `isa`, `threads`, `trials` and `tasks` (per task `op`, `shapes`, `weight`, `direct_ms` and,
where a Winograd config built, `winograd_ms`, `ratio`, `config`, `fallback_ms`, `fallback`).
`--quick` is a smoke run: the first eligible task, 2 configs, one round.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _timing import best_seconds  # noqa: E402

from autosched import zoo  # noqa: E402
from autosched.backend import renderer_for  # noqa: E402
from autosched.codegen.gcc import compile_c, target_flags  # noqa: E402
from autosched.compile.kernel import build_kernel  # noqa: E402
from autosched.frontend.onnx import import_model, load_onnx  # noqa: E402
from autosched.graph.passes import optimize_for  # noqa: E402
from autosched.measure.fold import fold_weights  # noqa: E402
from autosched.runtime import Kernel  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import Task, extract_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402
from search_spaces.llvm import conv2d_winograd as wino  # noqa: E402
from search_spaces.llvm.common import InvalidConfigError  # noqa: E402

SEARCHED = ("algorithm", "oc_bn", "ic_bn", "wino_tile_t", "wino_gemm_order", "pad")  # those in the task's space


class _Timed:
    """A compiled kernel bound to the task's seeded inputs; `ms` keeps the best round seen, so
    candidates timed in interleaved rounds each get the machine's quiet moments."""

    def __init__(self, task: Task, sched, args, threads: int, extra: Sequence[np.ndarray] = ()):
        kern = build_kernel(sched, args, "task")
        kern.set_num_threads(threads)
        outs = [np.empty(shape, dtype) for shape, dtype in zip(task.out_shapes, task.out_dtypes)]
        self._kern, self._bound = kern, kern.bind(task.random_inputs(0) + outs + list(extra))
        self.ms = float("inf")

        self._threads = threads

    def round(self) -> float:
        run = lambda: self._kern.run(self._bound)  # noqa: E731
        if self._threads == 1:  # CPU time of this thread: blind to other processes taking the core
            run()
            n, start = 0, time.thread_time()
            while time.thread_time() - start < 0.05:
                run()
                n += 1
            seconds = (time.thread_time() - start) / n
        else:
            seconds = best_seconds(run, min_s=0.05, rounds=1)
        self.ms = min(self.ms, 1e3 * seconds)
        return self.ms


def interleaved(kernels: Sequence[_Timed], rounds: int) -> None:
    for _ in range(rounds):
        for k in kernels:
            k.round()


def built_kernel(task: Task, tpl, config, target: Target, threads: int) -> _Timed:
    """The kernel as a built model runs it (and the tuner times it): stages that read only
    weights precomputed (`autosched.measure.fold`), their values passed as arguments."""
    sched, args = tpl.apply(task, config, target)
    args, folded = fold_weights(sched, args, task)
    inputs, extra = task.random_inputs(0), []
    renderer = renderer_for("llvm")
    for f in folded:
        code = renderer.render(f.func)
        pre = Kernel(compile_c(code, target_flags(target)), renderer.symbol(f.func), f.func.params, code)
        extra.append(np.empty(f.func.params[-1].shape, f.func.params[-1].dtype))
        pre(*[inputs[i] for i in f.sources], extra[-1])
    return _Timed(task, sched, args, threads, extra)


def direct_fallback(tpl, task: Task, target: Target):
    """The fallback config with the direct algorithm (the untuned kernel before Winograd)."""
    if task.op == "Conv":  # its Winograd fallback also changes the channel blocks
        return tpl.fallback(task, target, direct_only=True)
    config = tpl.fallback(task, target)
    return config.space.from_values({**{k.name: config[k.name] for k in config.space.knobs}, **wino.direct_values()})


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", type=Path, nargs="?", help="the ONNX model (default: the zoo's ResNet-18)")
    p.add_argument("--trials", type=int, default=24, help="random Winograd configs per task")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--target", default="llvm")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (best kept)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: the first eligible task, 2 configs, one round")
    args = p.parse_args(argv)
    trials, rounds = (2, 1) if args.quick else (args.trials, args.rounds)
    target = Target.parse(args.target)
    rng = np.random.default_rng(args.seed)
    source = load_onnx(args.model) if args.model else import_model(zoo.resnet18(), source="resnet18")
    model_name = args.model.name if args.model else "resnet18.onnx"
    rows = []
    # the tasks the build runs: with layout planning, ConvNCHWc
    for task in extract_tasks(optimize_for(source, target)).tasks:
        if args.quick and rows:
            break
        if task.op not in ("Conv", "ConvNCHWc"):
            continue
        tpl = get_template(task.op, "llvm")
        space = tpl.space(task, target)
        if "algorithm" not in {k.name for k in space.knobs}:
            continue
        base = direct_fallback(tpl, task, target)
        direct = built_kernel(task, tpl, base, target, args.threads)
        untuned = tpl.fallback(task, target)
        candidates = []
        for _ in range(trials):
            values = {k.name: base[k.name] for k in space.knobs}
            for name in (n for n in SEARCHED if n in values):
                opts = [v for v in space.knob(name).values if name != "algorithm" or v != wino.DIRECT]
                values[name] = opts[int(rng.integers(len(opts)))]
            config = space.from_values(values)
            try:
                candidates.append((config, built_kernel(task, tpl, config, target, args.threads)))
            except InvalidConfigError:
                continue
        interleaved([direct] + [k for _, k in candidates], rounds)
        row = {"op": task.op, "shapes": [list(s) for s in task.shapes[:2]], "weight": task.weight}
        names = {k.name for k in space.knobs}
        if candidates:
            config, best = min(candidates, key=lambda ck: ck[1].ms)
            fallback = built_kernel(task, tpl, untuned, target, args.threads) if wino.algorithm(untuned) != \
                wino.DIRECT else direct
            interleaved([direct, best, fallback], rounds)  # compared in the same moments
            row.update(winograd_ms=round(best.ms, 4), ratio=round(best.ms / direct.ms, 3),
                       config={n: config[n] for n in SEARCHED if n in names}, fallback_ms=round(fallback.ms, 4),
                       fallback={n: untuned[n] for n in SEARCHED if n in names})
        row["direct_ms"] = round(direct.ms, 4)
        rows.append(row)
    result = {"model": model_name, "target": str(target), "isa": target.isa, "threads": args.threads,
              "trials": trials, "tasks": rows}
    if args.json:
        print(json.dumps(result))
        return result
    print(f"{model_name}, {target.isa}, {args.threads} threads: kernel ms per call as a built model runs it "
          f"(weight-only stages precomputed); winograd = best of {trials} random configs; untuned = the fallback")
    print(f"{'input':16} {'weights':14} {'direct':>8} {'winograd':>9} {'ratio':>6} {'untuned':>8}  config")
    for r in rows:
        x, w = ("x".join(map(str, s)) for s in r["shapes"])
        if "winograd_ms" in r:
            cfg = " ".join(f"{k}={v}" for k, v in r["config"].items())
            print(f"{x:16} {w:14} {r['direct_ms']:8.3f} {r['winograd_ms']:9.3f} {r['ratio']:6.2f} "
                  f"{r['fallback_ms']:8.3f}  {cfg}")
        else:
            print(f"{x:16} {w:14} {r['direct_ms']:8.3f}  (no Winograd config built)")
    return result


if __name__ == "__main__":
    main()
