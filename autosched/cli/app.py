"""The `autosched` command line.

Each subcommand is one entry of `COMMANDS`: a function that adds its
arguments and a function that runs it and returns the exit status.  The
command line only wires stages together; anything a user gets wrong
surfaces as an AutoschedError, printed as one `error: …` line (exit 2),
with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from autosched.cli import db, fleet, model, tune
from autosched.cli.args import Command
from autosched.errors import AutoschedError, TuneInterrupted


COMMANDS: dict[str, Command] = {
    "tasks": Command("list the tuning tasks of a model", model.tasks_arguments, model.run_tasks),
    "tune": Command("tune a model's tasks on this machine, committing every measurement to the tuning database",
                    tune.tune_arguments, tune.run_tune),
    "build": Command("compile a model into a shared library with its weights", model.build_arguments, model.run_build),
    "run": Command("run a built model on inputs from an .npz file", model.run_arguments, model.run_run),
    "check": Command("build a model and compare its outputs with onnxruntime", model.check_arguments, model.run_check),
    "bench": Command("median latency of a model against onnxruntime", model.bench_arguments, model.run_bench),
    "report": Command("an HTML report of tuning from the database (figures and tables)", model.report_arguments,
                      model.run_report),
    "db": Command("the tuning database: import, export, stats, best, merge, prune", db.add_arguments, db.run),
    "fleet": Command("start, inspect and stop a Ray fleet of measuring machines", fleet.fleet_arguments, fleet.run_fleet),
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


