"""How fast random, genetic and XGBoost search find fast kernels, and how fast those kernels are.

    python benchmarks/search.py [--json] [--quick] [--seeds 3] [--trials 512] [--threads 2] [--details out.json]
                                [--tuner-options '{"xgb": {"plan_size": 64}}']

Two tasks: matmul 1024³ and ResNet-18's conv 64→64 3×3 on 56×56 (bias and ReLU fused). For
each tuner and seed the task is tuned from scratch with the local builder and runner (a fresh
kernel cache per run, so no run compiles less than another). Reported: the best GFLOP/s after
64/128/256/512 trials (median over seeds); the trials each run needs to reach 90% of the best
any run found (median over runs of both tasks; a run that never does counts its whole budget);
where the time per trial went (tuner and cost model in this process, parallel builds, serial
runs; and, from a serial sample, generating+lowering a candidate against compiling it); the
best kernels against numpy (a child process with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset,
so OpenBLAS uses its AVX-512 kernels) and onnxruntime (a single-Conv model with the same
shapes in NCHW, bias and ReLU), timed alternately in one run with the same thread count. `--json`
prints one JSON object (`matmul_1024`, `conv_resnet`, `trials_to_90pct`); `--quick` is a smoke run
(4 trials, one seed, one timing round).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import best_seconds  # noqa: E402
from gemm import numpy_child  # noqa: E402

from autosched import zoo  # noqa: E402
from autosched.backend import renderer_for  # noqa: E402
from autosched.codegen.gcc import compile_c, target_flags  # noqa: E402
from autosched.compile.evaluate import onnxruntime_session  # noqa: E402
from autosched.compile.model import kernel_as_built  # noqa: E402
from autosched.frontend.onnx import import_model  # noqa: E402
from autosched.graph.builder import GraphBuilder  # noqa: E402
from autosched.graph.ir import Op  # noqa: E402
from autosched.graph.passes import optimize_for  # noqa: E402
from autosched.lower import lower  # noqa: E402
from autosched.measure import Builder, BuildResult, MeasureInput, MeasureResult, Runner, measure_with  # noqa: E402
from autosched.measure.fold import constant_inputs  # noqa: E402
from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions  # noqa: E402
from autosched.space import Config  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import Task, extract_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402
from autosched.tuner import ModelBasedTuner, get_tuner  # noqa: E402
from cost_models import CostModel  # noqa: E402
from search_spaces.llvm.common import InvalidConfigError  # noqa: E402

TUNERS = ("random", "ga", "xgb")
QUICK_TRIALS = 4  # per tuner and task with --quick: the whole pipeline runs, in seconds rather than an hour


def matmul_task(n: int = 1024) -> Task:
    b = GraphBuilder()
    w = b.constant("w", np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
    b.output(b.node(Op.MATMUL, [b.input("x", (n, n)), w]))
    return extract_tasks(b.build()).tasks[0]


def resnet_conv_task() -> Task:
    """ResNet-18's 64-channel 3×3 convolution + ReLU, as the build for this host runs it (in channel blocks)."""
    graph = optimize_for(import_model(zoo.resnet18(), source="resnet18"), Target.parse("llvm"))
    return next(t for t in extract_tasks(graph).tasks if t.op == "ConvNCHWc" and t.shapes[1] == (64, 64, 3, 3)
                and len(t.shapes[0]) == 5 and [e.op for e in t.epilogue] == ["Relu"])


# --- where the time goes -------------------------------------------------------------------

@dataclass
class Clock:
    build_s: float = 0.0
    run_s: float = 0.0
    model_s: float = 0.0


class TimedBuilder(Builder):
    def __init__(self, inner: Builder, clock: Clock) -> None:
        self.inner, self.clock = inner, clock

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        t0 = time.perf_counter()
        try:
            return self.inner.build(inputs)
        finally:
            self.clock.build_s += time.perf_counter() - t0


class TimedRunner(Runner):
    def __init__(self, inner: Runner, clock: Clock) -> None:
        self.inner, self.clock = inner, clock

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        t0 = time.perf_counter()
        try:
            return self.inner.run(inputs, builds)
        finally:
            self.clock.run_s += time.perf_counter() - t0


class TimedModel(CostModel):
    """The model-based tuner's cost model, with its features, fitting and predictions timed."""

    def __init__(self, inner: CostModel, clock: Clock) -> None:
        self.inner, self.clock = inner, clock

    def fit(self, records, transfer=()) -> None:
        t0 = time.perf_counter()
        self.inner.fit(records, transfer)
        self.clock.model_s += time.perf_counter() - t0

    def predict(self, indices) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.inner.predict(indices)
        self.clock.model_s += time.perf_counter() - t0
        return out


@dataclass
class Run:
    task: str
    tuner: str
    seed: int
    costs: list[float] = field(default_factory=list)  # per trial, in order; inf for failures
    configs: list[Config] = field(default_factory=list)
    wall_s: float = 0.0
    clock: Clock = field(default_factory=Clock)

    def best_after(self, n: int) -> float:
        return min(self.costs[:n], default=math.inf)

    def trials_to(self, cost: float) -> int | None:
        best = math.inf
        for k, c in enumerate(self.costs, start=1):
            best = min(best, c)
            if best <= cost:
                return k
        return None


def tune_once(name: str, task: Task, target: Target, tuner: str, seed: int, trials: int, options: RunnerOptions,
              tuner_options: dict, workdir: Path) -> Run:
    run = Run(name, tuner, seed)
    space = get_template(task.op, target.kind).space(task, target)
    search = get_tuner(tuner)(task, space, target, seed=seed, **tuner_options.get(tuner, {}))
    if isinstance(search, ModelBasedTuner):
        search.model = TimedModel(search.model, run.clock)

    def keep(inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        run.costs.extend(r.cost if r.ok else math.inf for r in results)
        run.configs.extend(i.config for i in inputs)

    cache = workdir / f"{name}-{tuner}-{seed}"
    with LocalRunner(options) as runner:
        measure = measure_with(TimedBuilder(LocalBuilder(cache_dir=cache), run.clock), TimedRunner(runner, run.clock))
        t0 = time.perf_counter()
        search.tune(trials, measure, [keep])
        run.wall_s = time.perf_counter() - t0
    return run


def stage_sample(task: Task, target: Target, n: int, workdir: Path) -> dict:
    """Serial CPU time per candidate: template + lowering + C rendering, and gcc."""
    template = get_template(task.op, target.kind)
    space = template.space(task, target)
    gen, cc = [], []
    for i in space.sample(4 * n, np.random.default_rng(0)):
        if len(cc) == n:
            break
        t0 = time.perf_counter()
        try:
            sched, args = template.apply(task, space.get(i), target)
        except InvalidConfigError:
            continue  # refused before compiling: what the builder reports as INSTANTIATION_ERROR
        code = renderer_for(target.kind).render(lower(sched, args, "candidate"))
        t1 = time.perf_counter()
        compile_c(code, target_flags(target), cache_dir=workdir / "stage-sample")
        cc.append(time.perf_counter() - t1)
        gen.append(t1 - t0)
    return {"generate_lower_ms": round(1e3 * statistics.mean(gen), 1), "compile_ms": round(1e3 * statistics.mean(cc), 1)}


# --- the tuned kernels against numpy and onnxruntime ---------------------------------------

def tuned_kernel(task: Task, target: Target, config: Config, threads: int):
    """The tuned kernel as a built model runs it, and as the tuner timed it: stages that read only
    weights (matmul's packed B, Winograd's transformed kernel) computed once beforehand."""
    sched, args = get_template(task.op, target.kind).apply(task, config, target)
    ins = task.random_inputs(0)
    kern, folded = kernel_as_built(sched, args, constant_inputs(task), target, ins)
    kern.set_num_threads(threads)
    out = np.empty(task.out_shapes[0], task.out_dtypes[0])
    bound = kern.bind(ins + [out] + folded)
    kern.run(bound)
    ref = task.reference(ins)[0]
    if not np.allclose(out, ref, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(ref).max()))):
        raise SystemExit(f"the tuned kernel of {task.op} {task.shapes} is wrong")
    return lambda: kern.run(bound)


def vs_numpy(task: Task, target: Target, config: Config, threads: int, rounds: int) -> dict:
    m, k = task.shapes[0]
    n = task.shapes[1][1]
    run = tuned_kernel(task, target, config, threads)
    child = numpy_child(threads, None)  # OpenBLAS picks the host's kernels
    child.stdout.readline()  # the BLAS description
    ours = theirs = 0.0
    for _ in range(rounds):
        ours = max(ours, task.flops / best_seconds(run) / 1e9)
        child.stdin.write(f"{m} {n} {k}\n")
        child.stdin.flush()
        theirs = max(theirs, json.loads(child.stdout.readline())["gflops"])
    child.stdin.close()
    child.wait()
    return {"tuned_gflops": round(ours, 1), "numpy_gflops": round(theirs, 1), "ratio": round(ours / theirs, 3)}


def nchw_shape(shape: Sequence[int]) -> list[int]:
    """The task's (N, C/b, H, W, b) channel-blocked shape in onnxruntime's layout, NCHW."""
    n, blocks, h, w, b = shape
    return [n, blocks * b, h, w]


def nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(nchw_shape(x.shape)))


def single_conv_model(task: Task) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    attrs = dict(task.attrs)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), name)
               for s, name in zip(task.shapes[1:], ("w", "b"))]
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=list(attrs["pads"]), strides=list(attrs["strides"]),
                            dilations=list(attrs["dilations"]), group=attrs["group"])
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph([conv, relu], "single_conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, nchw_shape(task.shapes[0]))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, nchw_shape(task.out_shapes[0]))],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # onnxruntime 1.31 refuses onnx 1.23's default IR version
    return model


def vs_onnxruntime(task: Task, target: Target, config: Config, threads: int, rounds: int, workdir: Path) -> dict:
    path = workdir / "single_conv.onnx"
    onnx.save(single_conv_model(task), str(path))
    session = onnxruntime_session(path, threads)
    feeds = {"x": nchw(task.random_inputs(0)[0])}
    run = tuned_kernel(task, target, config, threads)
    ours = theirs = math.inf
    for _ in range(rounds):
        ours = min(ours, best_seconds(run))
        theirs = min(theirs, best_seconds(lambda: session.run(["y"], feeds)))
    return {"tuned_ms": round(1e3 * ours, 3), "onnxruntime_ms": round(1e3 * theirs, 3), "ratio": round(ours / theirs, 3)}


# --- the benchmark ----------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_TRIALS} trials, one seed, one round")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--trials", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of the final comparisons")
    p.add_argument("--tuner-options", type=json.loads, default={}, metavar="JSON",
                   help='options per tuner, e.g. \'{"xgb": {"plan_size": 64}}\'')
    p.add_argument("--details", type=Path, help="also write every figure (per tuner, per stage) to this JSON file")
    args = p.parse_args(argv)
    trials, seeds = (QUICK_TRIALS, 1) if args.quick else (args.trials, args.seeds)
    checkpoints = [c for c in (2, 4) if args.quick] or [c for c in (64, 128, 256, 512) if c <= trials]
    options = RunnerOptions(repeat=1 if args.quick else 3, min_repeat_ms=1.0 if args.quick else 20.0,
                            threads=args.threads)
    rounds = 1 if args.quick else args.rounds
    target = Target.parse("llvm")
    tasks = {"matmul_1024": matmul_task(), "conv_resnet": resnet_conv_task()}
    log = sys.stderr
    runs: list[Run] = []
    report: dict = {"tasks": {}, "stages": {}, "best": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-search-") as tmp:
        workdir = Path(tmp)
        for name, task in tasks.items():
            report["stages"][name] = stage_sample(task, target, 2 if args.quick else 12, workdir)
            for tuner in TUNERS:
                for seed in range(seeds):
                    run = tune_once(name, task, target, tuner, seed, trials, options, args.tuner_options, workdir)
                    runs.append(run)
                    print(f"[{name}] {tuner} seed {seed}: best {task.flops / run.best_after(trials) / 1e9:.1f} GFLOP/s "
                          f"in {run.wall_s:.0f} s", file=log, flush=True)
        best = {name: min((r for r in runs if r.task == name), key=lambda r: r.best_after(trials)) for name in tasks}
        best_config = {name: r.configs[r.costs.index(r.best_after(trials))] for name, r in best.items()}
        mm = vs_numpy(tasks["matmul_1024"], target, best_config["matmul_1024"], args.threads, rounds)
        conv = vs_onnxruntime(tasks["conv_resnet"], target, best_config["conv_resnet"], args.threads, rounds,
                              workdir)

    to90 = {}
    report["runs"] = []
    for tuner in TUNERS:
        counts = []
        for r in runs:
            if r.tuner == tuner:
                reached = r.trials_to(best[r.task].best_after(trials) / 0.9)
                counts.append(reached if reached is not None else trials)
                report["runs"].append({"task": r.task, "tuner": tuner, "seed": r.seed, "trials_to_90pct": reached,
                                       "best_gflops": round(tasks[r.task].flops / r.best_after(trials) / 1e9, 1)})
        to90[tuner] = statistics.median(counts)
    for name, task in tasks.items():
        rows = {}
        for tuner in TUNERS:
            mine = [r for r in runs if r.task == name and r.tuner == tuner]
            n = sum(len(r.costs) for r in mine)
            rows[tuner] = {
                "best_gflops": {c: round(statistics.median(task.flops / r.best_after(c) / 1e9 for r in mine), 1)
                                for c in checkpoints},
                "failures": sum(math.isinf(c) for r in mine for c in r.costs),
                "s_per_trial": {
                    "total": round(sum(r.wall_s for r in mine) / n, 3),
                    "tuner": round(sum(r.wall_s - r.clock.build_s - r.clock.run_s - r.clock.model_s
                                       for r in mine) / n, 4),
                    "model": round(sum(r.clock.model_s for r in mine) / n, 4),
                    "build": round(sum(r.clock.build_s for r in mine) / n, 3),
                    "run": round(sum(r.clock.run_s for r in mine) / n, 3)},
            }
        report["tasks"][name] = rows
        report["best"][name] = {"tuner": best[name].tuner, "seed": best[name].seed,
                                "gflops": round(task.flops / best[name].best_after(trials) / 1e9, 1),
                                "knobs": best_config[name].to_json()["knobs"]}
    result = {"matmul_1024": mm, "conv_resnet": conv, "trials_to_90pct": to90}
    if args.details:
        args.details.write_text(json.dumps({**result, **report, "trials": trials, "seeds": seeds}, indent=1))
    if args.json:
        print(json.dumps(result))
    else:
        _print(report, result, trials, seeds, args.threads)
    return {**result, **report}


def _print(report: dict, result: dict, trials: int, seeds: int, threads: int) -> None:
    print(f"trials {trials}, seeds {seeds}, threads {threads}")
    for name, rows in report["tasks"].items():
        checkpoints = list(next(iter(rows.values()))["best_gflops"])
        print(f"\n{name}: best GFLOP/s after N trials (median over seeds); seconds per trial")
        print(f"{'tuner':8}" + "".join(f"{c:>8}" for c in checkpoints) + f"{'fails':>7}   total   tuner   model   build"
              "     run")
        for tuner, row in rows.items():
            s = row["s_per_trial"]
            print(f"{tuner:8}" + "".join(f"{row['best_gflops'][c]:8.1f}" for c in checkpoints) + f"{row['failures']:7d}"
                  f"{s['total']:8.3f}{s['tuner']:8.4f}{s['model']:8.4f}{s['build']:8.3f}{s['run']:8.3f}")
        b = report["best"][name]
        print(f"best: {b['gflops']} GFLOP/s by {b['tuner']} (seed {b['seed']}): {b['knobs']}")
        st = report["stages"][name]
        print(f"per candidate, serial: generate+lower {st['generate_lower_ms']} ms, compile {st['compile_ms']} ms")
    print(f"\ntrials to 90% of the best found (median over runs): {result['trials_to_90pct']}")
    mm, conv = result["matmul_1024"], result["conv_resnet"]
    print(f"matmul 1024³: tuned {mm['tuned_gflops']} GFLOP/s, numpy {mm['numpy_gflops']} GFLOP/s, ratio {mm['ratio']}")
    print(f"conv 64→64 3×3 56²: tuned {conv['tuned_ms']} ms, onnxruntime {conv['onnxruntime_ms']} ms, "
          f"ratio {conv['ratio']}")


if __name__ == "__main__":
    main()
