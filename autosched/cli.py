"""The `autosched` command line.

Each subcommand is one entry of `COMMANDS`: a function that adds its
arguments and a function that runs it and returns the exit status.  The
command line only wires stages together; anything a user gets wrong
surfaces as an AutoschedError, printed as one `error: …` line (exit 2),
with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from autosched import cli_db
from autosched.errors import AutoschedError, TuneInterrupted
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Graph
from autosched.graph.passes import optimize
from autosched.target import Target
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


def load_graph(args: argparse.Namespace, target: Target) -> Graph:
    """The model named on the command line, imported and optimized for `target` (its --target)."""
    return optimize(load_onnx(args.model, dict(args.shape)), target.layout_lanes)


def _tasks_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)


def run_tasks(args: argparse.Namespace) -> int:
    target = Target.parse(args.target)
    tasks = extract_tasks(load_graph(args, target))
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
    add_build_db_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="the library to write; OUT's .json manifest and .weights go beside it")


def add_build_db_arguments(parser: argparse.ArgumentParser) -> None:
    """--db and --no-shipped, for the commands that build a model."""
    add_db_argument(parser)
    parser.add_argument("--no-shipped", action="store_true",
                        help="ignore the records shipped with autosched (used for tasks the database has none for)")


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (a file or SQLAlchemy URL; default: $AUTOSCHED_DB, else "
                             "$XDG_DATA_HOME/autosched/tuning.db)")


def _build(args: argparse.Namespace, output: Path):
    """Build from the database; say once which tasks have records only for another ISA."""
    from autosched.api import build
    out = build(args.model, args.target, db=args.db, output=output, shapes=dict(args.shape),
                shipped=not args.no_shipped, emulate=getattr(args, "emulate", False))
    if out.other_isa:
        isas = sorted({isa for found in out.other_isa.values() for isa in found})
        print(f"note: {len(out.other_isa)} tasks have records only for {', '.join(isas)}, not for this target's "
              f"{Target.parse(args.target).isa}: they use the default schedule", file=sys.stderr)
    return out


def run_build(args: argparse.Namespace) -> int:
    out = _build(args, Path(args.output))
    files = out.files
    shipped = f" ({len(out.shipped)} from the shipped records)" if out.shipped else ""
    print(f"wrote {files.library}, {files.manifest.name} and {files.weights.name}, "
          f"{out.tuned} of {out.tasks} tasks with tuned schedules{shipped}")
    return 0


def _tune_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_db_argument(parser)
    parser.add_argument("--trials", type=int, required=True, help="measurements over all tasks")
    parser.add_argument("--tuner", default="xgb", help="random, grid, ga or xgb (default)")
    parser.add_argument("--round", type=int, default=16, help="trials per task per round (default 16)")
    parser.add_argument("--scheduler", default="gradient", choices=["costliest", "gradient"],
                        help="which task gets the next round: Ansor's gradient, the steepest expected latency "
                             "decrease per trial (default), or the task costing the model most time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: measure candidates in the CPU emulation (proves them correct; "
                             "the times are the CPU's)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--quiet", dest="progress", action="store_const", const="quiet", default="auto",
                       help="no progress, only the last line")
    shown.add_argument("--json-lines", dest="progress", action="store_const", const="json-lines",
                       help="progress and summary as JSON objects, one per line")
    shown.add_argument("--lines", dest="progress", action="store_const", const="lines",
                       help="one plain line per measured batch (the default when stderr is not a terminal)")
    parser.add_argument("--ray-address", metavar="auto|HOST:PORT",
                        help="build and measure on the Ray fleet there (see 'autosched fleet') instead of this machine")


def _fleet_measurers(target: Target, ray_address: str, emulate: bool):
    """Builder and runner of the Ray fleet at `ray_address`: CPU targets on the nodes of their
    ISA class, cuda targets built by nvcc nodes and timed by GPU actors of their arch, or with
    `emulate` checked in the CPU emulation on CPU nodes."""
    from autosched.fleet import fleet_measurers
    from autosched.measure.emulate import EMULATION_RUNNER
    from autosched.measure.ray import RayOptions
    _check_emulate(target, emulate)
    return fleet_measurers(ray_address, RayOptions(emulate=emulate, runner=EMULATION_RUNNER if emulate else None))


def _check_emulate(target: Target, emulate: bool) -> None:
    if emulate and target.kind != "cuda":
        raise AutoschedError(f"--emulate runs CUDA kernels on the CPU; target {target} is not a cuda target")


def _measurers(target: Target, emulate: bool):
    """Builder and runner for `target`: gcc and the CPU worker, nvcc and the GPU worker, or the
    CUDA emulation's gcc build and the CPU worker (correctness only: its times are the CPU's)."""
    from autosched.measure.local import LocalBuilder, LocalRunner
    _check_emulate(target, emulate)
    if target.kind != "cuda":
        return LocalBuilder(), LocalRunner()
    if emulate:
        from autosched.measure.emulate import EMULATION_RUNNER, EmulationBuilder
        return EmulationBuilder(), LocalRunner(EMULATION_RUNNER)
    from autosched.measure.gpu import GpuRunner
    from autosched.measure.nvcc import NvccBuilder
    return NvccBuilder(), GpuRunner()


def run_tune(args: argparse.Namespace) -> int:
    from rich.console import Console
    from autosched.api import tune
    from autosched.progress import display_for, summary_table
    target = Target.parse(args.target)
    display = display_for(args.progress)
    builder, runner = (_fleet_measurers(target, args.ray_address, args.emulate) if args.ray_address
                       else _measurers(target, args.emulate))
    with runner:
        out = tune(args.model, target, args.trials, db=args.db, tuner=args.tuner, round_trials=args.round,
                   seed=args.seed, scheduler=args.scheduler, shapes=dict(args.shape), builder=builder, runner=runner,
                   callbacks=[display])
    summary = out.summary
    if args.progress == "json-lines":
        display.emit("summary", session=out.session, **display.tally.snapshot(),
                     skipped=[{"task": t.key, "why": why} for t, why in summary.skipped])
        return 0
    if args.progress != "quiet":
        Console(soft_wrap=True).print(summary_table(display.tally, f"tuned {args.model}"), highlight=False)
        for task, why in summary.skipped:
            print(f"{task.op:<12} not tuned: {why}")
    db = f" --db {args.db}" if args.db else ""
    print(f"{summary.trials} trials committed to {out.database}; build with: autosched build {args.model} "
          f"--target '{target}'{db} -o model.so")
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
    add_build_db_arguments(parser)
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
    files = _build(args, Path(tmp) / "model.so").files
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
    add_build_db_arguments(parser)
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


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", nargs="?", help="ONNX model whose tasks to report (default: all)")
    parser.add_argument("--target", default="llvm", help="the machine's target (default llvm: this host)")
    parser.add_argument("--shape", action="append", type=parse_shape, default=[], metavar="NAME=DIMS",
                        help="bind an input's dynamic dimensions (repeatable)")
    add_db_argument(parser)
    parser.add_argument("-o", "--output", default="report.html", metavar="REPORT.html")


def run_report(args: argparse.Namespace) -> int:
    from autosched.api import model_tasks, open_database
    from autosched.report import write_report
    tasks = model_tasks(args.model, args.target, dict(args.shape))[1] if args.model else None
    with open_database(args.db) as db:
        n = write_report(db, args.output, Target.parse(args.target), args.model, tasks)
    print(f"wrote {args.output} ({n} records)")
    return 0


def _fleet_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="fleet_action", metavar="ACTION", required=True)
    head = actions.add_parser("head", help="start a head node here (it also offers this machine's devices)")
    head.add_argument("--port", type=int, default=6379)
    head.add_argument("--host", default="127.0.0.1",
                      help="address the head is reached at (default: loopback; Ray 2.60 still listens on every "
                           "interface, the token keeps the fleet closed: see the README)")
    worker = actions.add_parser("worker", help="start a node here with its devices detected, joined to a head")
    worker.add_argument("--address", required=True, metavar="HOST:PORT")
    worker.add_argument("--host", default=None, help="address this node advertises (default: Ray's choice)")
    status = actions.add_parser("status", help="nodes, their device resources and what each is measuring")
    status.add_argument("--address", default="auto", metavar="auto|HOST:PORT")
    status.add_argument("--json", action="store_true", help="one JSON object with a 'nodes' list")
    actions.add_parser("stop", help="stop the nodes 'fleet head/worker' started on this machine")


def run_fleet(args: argparse.Namespace) -> int:
    from autosched import fleet
    if args.fleet_action in ("head", "worker"):
        node = (fleet.start_head(args.port, args.host) if args.fleet_action == "head"
                else fleet.start_worker(args.address, args.host))
        print(f"{node.role} started (pid {node.pid}, log {node.log}), fleet at {node.address}")
        print(f"resources: {json.dumps(node.resources, sort_keys=True)}")
        if node.role == "head":
            print(f"join with: autosched fleet worker --address {node.address}  (token auth is on: workers and "
                  "drivers need this machine's ~/.ray/auth_token or RAY_AUTH_TOKEN)")
    elif args.fleet_action == "status":
        fleet.connect(args.address)
        status = fleet.fleet_status()
        fleet.disconnect()
        print(json.dumps(status, indent=1, sort_keys=True) if args.json else fleet.format_status(status))
    else:
        stopped = fleet.stop_nodes()
        print("\n".join(f"stopped {n.role} pid {n.pid} ({n.address})" for n in stopped) or "no fleet node runs here")
    return 0


COMMANDS: dict[str, Command] = {
    "tasks": Command("list the tuning tasks of a model", _tasks_arguments, run_tasks),
    "tune": Command("tune a model's tasks on this machine, committing every measurement to the tuning database",
                    _tune_arguments, run_tune),
    "build": Command("compile a model into a shared library with its weights", _build_arguments, run_build),
    "run": Command("run a built model on inputs from an .npz file", _run_arguments, run_run),
    "check": Command("build a model and compare its outputs with onnxruntime", _check_arguments, run_check),
    "bench": Command("median latency of a model against onnxruntime", _bench_arguments, run_bench),
    "report": Command("an HTML report of tuning from the database (figures and tables)", _report_arguments,
                      run_report),
    "db": Command("the tuning database: import, export, stats, best, merge, prune", cli_db.add_arguments, cli_db.run),
    "fleet": Command("start, inspect and stop a Ray fleet of measuring machines", _fleet_arguments, run_fleet),
}


def _show_warnings() -> None:
    """The database's warnings (skipped records, records from another CPU) as `warning: …` lines."""
    logger = logging.getLogger("autosched")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("warning: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.WARNING)


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
    _show_warnings()
    try:
        return args.run(args)
    except TuneInterrupted as exc:
        print(f"interrupted: {exc.kept} records kept in {exc.database}; run the same command again to resume "
              "(nothing measured is measured again)", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        if args.debug:
            raise
        print("interrupted", file=sys.stderr)
        return 130
    except AutoschedError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
