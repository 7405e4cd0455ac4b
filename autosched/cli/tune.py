"""`autosched tune`: a model's tasks measured on this machine or a Ray fleet, into the database."""
from __future__ import annotations

import argparse

from rich.console import Console

from autosched.api import tune
from autosched.cli.args import add_db_argument, add_model_arguments
from autosched.cli.progress import display_for, summary_table
from autosched.errors import AutoschedError
from autosched.measure.emulate import EMULATION_RUNNER, EmulationBuilder
from autosched.measure.gpu import GpuRunner
from autosched.measure.local import LocalBuilder, LocalRunner
from autosched.measure.nvcc import NvccBuilder
from autosched.target import Target


def tune_arguments(parser: argparse.ArgumentParser) -> None:
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
    `emulate` checked in the CPU emulation on CPU nodes. Ray is an optional extra: imported here."""
    from autosched.fleet import fleet_measurers
    from autosched.measure.ray import RayOptions
    _check_emulate(target, emulate)
    return fleet_measurers(ray_address, RayOptions(emulate=emulate, runner=EMULATION_RUNNER if emulate else None))


def _check_emulate(target: Target, emulate: bool) -> None:
    if emulate and target.kind != "cuda":
        raise AutoschedError(f"--emulate runs CUDA kernels on the CPU; target {target} is not a cuda target")


def _measurers(target: Target, emulate: bool):
    """Builder and runner for `target`: gcc and the CPU worker, nvcc and the GPU worker, or the
    CUDA emulation's gcc build and the CPU worker (correctness only: its times are the CPU's)."""
    _check_emulate(target, emulate)
    if target.kind != "cuda":
        return LocalBuilder(), LocalRunner()
    if emulate:
        return EmulationBuilder(), LocalRunner(EMULATION_RUNNER)
    return NvccBuilder(), GpuRunner()


def run_tune(args: argparse.Namespace) -> int:
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

