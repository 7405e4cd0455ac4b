"""The `autosched` command line.

Each subcommand is one entry of `COMMANDS`: a function that adds its
arguments and a function that runs it and returns the exit status.  The
command line only wires stages together; anything a user gets wrong
surfaces as an AutoschedError, printed as one `error: …` line (exit 2),
with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from autosched.errors import AutoschedError
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Graph
from autosched.graph.passes import optimize
from autosched.target import Target, TargetNotice
from autosched.task import TaskSet, extract_tasks


@dataclass(frozen=True)
class Command:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`NAME=1x3x224x224` → ("NAME", (1, 3, 224, 224))."""
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or min(shape) < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=DIMxDIMx... (e.g. input=1x3x224x224)")
    return name, shape


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL, --shape and --target, shared by every subcommand that compiles a model."""
    parser.add_argument("model", metavar="MODEL", help="ONNX model file")
    parser.add_argument("--target", default="llvm", help="compilation target, e.g. 'llvm' or 'cuda -arch=sm_90'")
    parser.add_argument(
        "--shape", action="append", type=parse_shape, default=[], metavar="NAME=DIMS",
        help="bind an input's dynamic dimensions, e.g. input=1x3x224x224 (repeatable)",
    )


def load_graph(args: argparse.Namespace) -> Graph:
    """The model named on the command line, imported and optimized."""
    return optimize(load_onnx(args.model, dict(args.shape)))


def _tasks_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def run_tasks(args: argparse.Namespace) -> int:
    target = Target.parse(args.target)
    tasks = extract_tasks(load_graph(args))
    print(f"model: {args.model}")
    print(f"target: {target}")
    print(format_task_table(tasks))
    return 0


def format_task_table(task_set: TaskSet) -> str:
    """One line per task: index, op, weight, GFLOPs (all occurrences), share, shapes, key."""
    total = task_set.total_flops or 1
    header = f"{'#':>3}  {'op':<18} {'weight':>6} {'GFLOPs':>9} {'share':>7}  {'shapes':<40} key"
    lines = [header]
    for i, task in enumerate(task_set.tasks):
        flops = task.flops * task.weight
        shapes = ",".join("x".join(map(str, s)) or "scalar" for s in task.shapes)
        epilogue = "+".join(e.op for e in task.epilogue)
        op = f"{task.op}+{epilogue}" if epilogue else task.op
        lines.append(
            f"{i:>3}  {op:<18} {task.weight:>6} {flops / 1e9:>9.4f} {100 * flops / total:>6.2f}%  {shapes:<40} {task.key}"
        )
    groups = len(task_set.groups)
    lines.append(
        f"{len(task_set.tasks)} tasks for {groups} fused groups, {task_set.total_flops / 1e9:.3f} GFLOPs per inference"
    )
    return "\n".join(lines)


def _build_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_log_argument(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the library to write; OUT's .json manifest and .weights go beside it")


def add_log_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log", action="append", default=[], metavar="LOG.jsonl",
                        help="tuning log(s) whose best configs to use (repeatable; default: untuned schedules)")


def _build(args: argparse.Namespace, graph, out: Path):
    """Build with the logs' best schedules; say once which tasks were tuned for another ISA only."""
    from autosched.build import build_model, default_kernel
    from autosched.history import TunedSchedules
    target = Target.parse(args.target)
    schedules = TunedSchedules(args.log) if args.log else default_kernel
    files = build_model(graph, out, target, schedules, emulate=getattr(args, "emulate", False))
    if args.log and schedules.other_isa:
        isas = sorted({str(isa) for found in schedules.other_isa.values() for isa in found})
        print(f"note: {len(schedules.other_isa)} tasks have logged records only for {', '.join(isas)}, not for "
              f"this target's {target.isa}: they use the default schedule", file=sys.stderr)
    return files, schedules


def run_build(args: argparse.Namespace) -> int:
    files, schedules = _build(args, load_onnx(args.model, dict(args.shape)), Path(args.output))
    tuned = f", {len(set(schedules.used))} tasks with tuned schedules" if args.log else ""
    print(f"wrote {files.library}, {files.manifest.name} and {files.weights.name}{tuned}")
    return 0


def _tune_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--trials", type=int, required=True, help="measurements over all tasks")
    parser.add_argument("--log", default="tuning.jsonl", metavar="LOG.jsonl",
                        help="where every measurement is appended (default: tuning.jsonl); a run resumes from "
                             "the records already there, measuring none of them again")
    parser.add_argument("--tuner", default="xgb", help="random, grid, ga or xgb (default)")
    parser.add_argument("--round", type=int, default=16, help="trials per task per round (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: measure candidates in the CPU emulation (proves them correct; "
                             "the times are the CPU's)")


def _measurers(target: Target, emulate: bool):
    """Builder and runner for `target`: gcc and the CPU worker, nvcc and the GPU worker, or the
    CUDA emulation's gcc build and the CPU worker (correctness only: its times are the CPU's)."""
    from autosched.measure.local import LocalBuilder, LocalRunner, RunnerOptions
    if target.kind != "cuda":
        if emulate:
            raise AutoschedError(f"--emulate runs CUDA kernels on the CPU; target {target} is not a cuda target")
        return LocalBuilder(), LocalRunner()
    if emulate:
        from autosched.measure.emulate import EmulationBuilder
        return EmulationBuilder(), LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0))
    from autosched.measure.gpu import GpuRunner
    from autosched.measure.nvcc import NvccBuilder
    return NvccBuilder(), GpuRunner()


def run_tune(args: argparse.Namespace) -> int:
    from autosched.task_scheduler import tune_tasks
    from autosched.tuner.callbacks import JsonLinesLog
    from autosched.history import load_history
    target = Target.parse(args.target)
    tasks = extract_tasks(load_graph(args)).tasks
    history = load_history([args.log], tasks, target) if os.path.exists(args.log) else {}
    if history:
        print(f"resuming from {sum(map(len, history.values()))} records of {len(history)} tasks in {args.log}")

    def progress(inputs, results) -> None:
        ok = [r.cost for r in results if r.ok]
        best = f"{min(ok) * 1e3:.4g} ms" if ok else "no success"
        print(f"  {inputs[0].task.op:<10} {len(results):3d} trials, batch best {best}, "
              f"{len(results) - len(ok)} failed", flush=True)

    builder, runner = _measurers(target, args.emulate)
    with runner:
        summary = tune_tasks(tasks, target, args.trials, builder, runner, args.tuner, args.round,
                             [JsonLinesLog(args.log), progress], args.seed, history)
    print(f"{'op':<12} {'weight':>6} {'trials':>6} {'best ms':>9} {'GFLOP/s':>8}")
    for p in summary.progress:
        ms = p.best_cost * 1e3
        gflops = p.task.flops / p.best_cost / 1e9 if p.best is not None else 0.0
        print(f"{p.task.op:<12} {p.task.weight:>6} {p.trials:>6} {ms:>9.4g} {gflops:>8.1f}")
    for task, why in summary.skipped:
        print(f"{task.op:<12} not tuned: {why}")
    print(f"{summary.trials} trials logged to {args.log}; build with: autosched build {args.model} "
          f"--target '{target}' --log {args.log} -o model.so")
    return 0


def _run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("library", metavar="OUT", help="a model built by 'autosched build'")
    parser.add_argument("--inputs", required=True, metavar="X.npz", help="arrays named like the model's inputs")
    parser.add_argument("--outputs", required=True, metavar="Y.npz", help="where to write the outputs")


def run_run(args: argparse.Namespace) -> int:
    from autosched.runtime import load_model
    model = load_model(args.library)
    try:
        with np.load(args.inputs) as z:
            feeds = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise AutoschedError(f"{args.inputs}: cannot read the inputs: {e}") from None
    np.savez(args.outputs, **model.run(feeds))
    print(f"wrote {args.outputs}")
    return 0


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_log_argument(parser)
    parser.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default 1e-3)")
    parser.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: run the CUDA kernels in the CPU emulation (no GPU needed)")


def _built(args: argparse.Namespace, tmp: str):
    """The model imported, built into `tmp` and loaded, plus an onnxruntime session and the graph."""
    from autosched.evaluate import onnxruntime_session
    from autosched.runtime import load_model
    graph = load_onnx(args.model, dict(args.shape))
    files, _ = _build(args, graph, Path(tmp) / "model.so")
    threads = getattr(args, "threads", None) or os.cpu_count() or 1
    model = load_model(files.library)
    model.set_num_threads(threads)
    return graph, model, onnxruntime_session(Path(args.model), threads)


def run_check(args: argparse.Namespace) -> int:
    from autosched.evaluate import compare, sample_inputs
    with tempfile.TemporaryDirectory(prefix="autosched-check-") as tmp:
        graph, model, session = _built(args, tmp)
        diffs = compare(model, session, sample_inputs(graph, args.seed), args.rtol, args.atol)
        model.close()
    print(f"{'output':<32} {'max abs err':>12} {'max rel err':>12}  verdict (rtol {args.rtol:g}, atol {args.atol:g})")
    for d in diffs:
        print(f"{d.name:<32} {d.max_abs:12.3e} {d.max_rel:12.3e}  {'ok' if d.ok else 'MISMATCH'}")
    return 0 if all(d.ok for d in diffs) else 1


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_log_argument(parser)
    parser.add_argument("--threads", type=int, default=None, help="threads for both (default: all cores)")
    parser.add_argument("--runs", type=int, default=30, help="timed runs of each, alternating")


def run_bench(args: argparse.Namespace) -> int:
    from autosched.evaluate import latency, sample_inputs
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        graph, model, session = _built(args, tmp)
        lat = latency(model, session, sample_inputs(graph, 0), runs=args.runs)
        model.close()
    print(f"model: {args.model}  threads: {args.threads or os.cpu_count()}  runs: {args.runs}")
    print(f"autosched   {lat.autosched_ms:9.3f} ms (median)")
    print(f"onnxruntime {lat.onnxruntime_ms:9.3f} ms (median)")
    print(f"ratio       {lat.ratio:9.3f} (autosched / onnxruntime; below 1 is faster)")
    return 0


COMMANDS: dict[str, Command] = {
    "tasks": Command("list the tuning tasks of a model", _tasks_arguments, run_tasks),
    "tune": Command("tune a model's tasks on this machine, logging every measurement", _tune_arguments, run_tune),
    "build": Command("compile a model into a shared library with its weights", _build_arguments, run_build),
    "run": Command("run a built model on inputs from an .npz file", _run_arguments, run_run),
    "check": Command("build a model and compare its outputs with onnxruntime", _check_arguments, run_check),
    "bench": Command("median latency of a model against onnxruntime", _bench_arguments, run_bench),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autosched", description="A learned auto-scheduler for ONNX models.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks")
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as notices:
            warnings.simplefilter("always", TargetNotice)
            try:
                return args.run(args)
            finally:  # a default the user did not choose, said once, in the CLI's words
                for n in notices:
                    if issubclass(n.category, TargetNotice):
                        print(f"note: {n.message}", file=sys.stderr)
                    else:
                        warnings.showwarning(n.message, n.category, n.filename, n.lineno)
    except AutoschedError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
