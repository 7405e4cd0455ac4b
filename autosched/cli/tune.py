"""`autosched tune`: a model's tasks measured on this machine or a Ray fleet, into the database."""
from __future__ import annotations

import argparse
import contextlib
import shlex
from dataclasses import asdict

from rich.console import Console

from autosched.api import tune
from autosched.cli.args import add_db_argument, add_model_arguments
from autosched.cli.progress import JsonLinesProgress, display_for, summary_table
from autosched.database.location import shown
from autosched.measure.caches import CACHE_CHOICES
from autosched.model_check import SHORTLIST, ModelCheck
from autosched.target import Target


def tune_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    add_db_argument(parser)
    parser.add_argument("--no-shipped", action="store_true",
                        help="ignore what ships with autosched: its records (standing in for tasks the database has "
                             "none for when the graph is chosen and the model checked) and its training logs (which "
                             "the cost models otherwise start trained on)")
    parser.add_argument("--trials", type=int, required=True, help="measurements over all tasks")
    parser.add_argument("--tuner", default="xgb", help="random, grid, ga or xgb (default)")
    parser.add_argument("--round", type=int, default=16, help="trials per task per round (default 16)")
    parser.add_argument("--scheduler", default="gradient", choices=["costliest", "gradient"],
                        help="which task gets the next round: Ansor's gradient, the steepest expected latency "
                             "decrease per trial (default), or the task costing the model most time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--emulate", action="store_true",
                        help="with --target cuda: check candidates in the CPU emulation (proves them correct) and "
                             "rank them by a static model of the GPU kernel (nvcc's SASS, registers, traffic); "
                             "records are kept apart from GPU timings")
    parser.add_argument("--no-model-check", dest="model_check", action="store_false",
                        help="end without timing the tuned build against the untuned one in the model (by default "
                             "the tuned configs with the largest estimated gains are A/B-tested there, and those "
                             "that lose are kept out of builds)")
    parser.add_argument("--ab-tasks", type=int, default=3, metavar="N",
                        help="tuned configs A/B-tested in the model at the end (default 3)")
    parser.add_argument("--shortlist", type=int, default=SHORTLIST, metavar="N",
                        help=f"configs per task (its fastest alone) timed in the model kernel by kernel at the end; "
                             f"the fastest there is built if it beats the default (default {SHORTLIST}, 0: none)")
    parser.add_argument("--caches", default="warm", choices=CACHE_CHOICES,
                        help="the cache state kernels are timed in: warm (calls back to back, the default), "
                             "cold (weights flushed from the caches, inputs read back in, as a model too big for "
                             "the last-level cache runs them), flushed (everything cold) or auto (cold where the "
                             "model's weights exceed the last-level cache, this machine's or the GPU's L2, else warm); "
                             "records keep it")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--quiet", dest="progress", action="store_const", const="quiet", default="auto",
                       help="no progress, only the last line")
    shown.add_argument("--json-lines", dest="progress", action="store_const", const="json-lines",
                       help="progress and summary as JSON objects, one per line")
    shown.add_argument("--lines", dest="progress", action="store_const", const="lines",
                       help="one plain line per measured batch (the default when stderr is not a terminal)")
    parser.add_argument("--ray-address", metavar="auto|HOST:PORT",
                        help="build and measure on the Ray fleet there (see 'autosched fleet') instead of this machine")


def run_tune(args: argparse.Namespace) -> int:
    target = Target.parse(args.target)
    display = display_for(args.progress)
    builder = runner = None  # the target's back end on this machine, made and closed by `tune`
    if args.ray_address:
        from autosched.fleet import fleet_measurers  # Ray is an optional extra: imported only here
        builder, runner = fleet_measurers(args.ray_address, target, args.emulate)
    with runner or contextlib.nullcontext():
        out = tune(args.model, target, args.trials, db=args.db, tuner=args.tuner, round_trials=args.round,
                   seed=args.seed, scheduler=args.scheduler, shapes=dict(args.shape), builder=builder, runner=runner,
                   emulate=args.emulate, callbacks=[display], substitutions=args.substitutions, caches=args.caches,
                   model_check=args.model_check, ab_tasks=args.ab_tasks, shipped=not args.no_shipped,
                   shortlist=args.shortlist)
    summary = out.summary
    if isinstance(display, JsonLinesProgress):  # --progress json-lines
        display.emit("summary", session=out.session, **display.tally.snapshot(),
                     left_to_others={"measuring": out.claims.contended, "measured": out.claims.measured},
                     skipped=[{"task": t.key, "why": why} for t, why in summary.skipped],
                     model_check=None if out.model_check is None else asdict(out.model_check))
        return 0
    if args.progress != "quiet":
        Console(soft_wrap=True).print(summary_table(display.tally, f"tuned {args.model}"), highlight=False)
        for task, why in summary.skipped:
            print(f"{task.op:<12} not tuned: {why}")
        claims = out.claims
        if claims.contended or claims.measured:
            print(f"{claims.contended + claims.measured} configs left to other tuners of this database "
                  f"({claims.contended} they were measuring, {claims.measured} they had measured)")
        if out.model_check is not None:
            _print_check(out.model_check)
    db = f" --db {shlex.quote(shown(args.db))}" if args.db else ""
    print(f"{summary.trials} trials committed to {out.database}; build with: autosched build {args.model} "
          f"--target '{target}'{db} -o model.so")
    return 0



def _print_check(check: ModelCheck) -> None:
    """The shortlists timed kernel by kernel, the in-model A/B tests, one line each, then the
    tuned build against the untuned one."""
    if check.kernels:
        chosen = [k for k in check.kernels if k.chosen is not None]
        lost = sum(v is False for k in check.kernels for v in k.verdicts)
        faster_alone = sum(k.chosen not in (None, 0) for k in check.kernels)
        print(f"in the model, kernel by kernel: {len(check.kernels)} tasks' fastest configs timed; {len(chosen)} "
              f"beat their default ({faster_alone} with a config other than the fastest alone), {lost} configs "
              f"lost")
        for k in check.kernels:
            if (j := k.chosen) is not None:
                print(f"  {k.op:<12} {k.configs_ms[j]:.3f} ms per call against {k.default_ms:.3f} on its default "
                      f"(the {_ordinal(j)} fastest alone)")
    for v in check.tested:
        said = {True: "kept", False: "declined", None: "within noise, not judged"}[v.wins]
        print(f"in the model: {v.op:<12} tuned config {said}: {v.with_ms:.3f} ms with it, "
              f"{v.without_ms:.3f} ms on its default (records estimated {v.estimated_gain_ms:+.3f} ms)")
    declined = f", {check.declined} untested tuned configs declined" if check.declined else ""
    print(f"in the model ({check.threads} threads, {check.runs} runs each, compared round by round): "
          f"tuned {check.tuned_ms:.3f} ms, untuned {check.untuned_ms:.3f} ms, {check.speedup:.2f}x{declined}")


def _ordinal(j: int) -> str:
    return {0: "1st", 1: "2nd", 2: "3rd"}.get(j, f"{j + 1}th")
