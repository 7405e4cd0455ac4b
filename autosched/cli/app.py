"""The `autosched` command line.

Each subcommand is one entry of `COMMANDS`: a function that adds its
arguments and a function that runs it and returns the exit status.  The
command line only wires stages together; anything a user gets wrong
surfaces as an AutoschedError, printed as one `error: …` line (exit 2),
with the traceback only under `--debug`.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

# Imported before any command runs, not on the first `np.random` numpy resolves lazily: a SIGTERM
# landing while numpy.random's Cython modules initialize raised its KeyboardInterrupt inside their
# registration with the ABCs, which clears errors, so the interrupt was lost silently and the
# command ran on (`autosched bench --runs 1000000` with SIGTERM sent as its build finished, on a
# 2-vCPU host busy with Ray tests: 2 hangs in 247, the stack of the lost raise printed by a debug
# build of `interrupt`; CI's flaky tests/test_signals.py case).
import numpy.random  # noqa: F401

from autosched import interrupts
from autosched.cli import db, fleet, model, substitutions, tune
from autosched.cli.args import Command
from autosched.errors import AutoschedError, TuneInterrupted
from autosched.tempdirs import sweep_stale

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
    "substitutions": Command("graph substitution rules: list, verify (z3 and numpy), generate", substitutions.add_arguments,
                             substitutions.run),
}


def _show_warnings() -> None:
    """The database's warnings (skipped records, records from another CPU) as `warning: …` lines;
    SQLAlchemy's own errors as `sqlalchemy: …`, without the interrupts it logs before re-raising."""
    for name, prefix in (("autosched", "warning"), ("sqlalchemy", "sqlalchemy")):
        logger = logging.getLogger(name)
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"{prefix}: %(message)s"))
            handler.addFilter(_not_an_interrupt)
            logger.addHandler(handler)
            logger.setLevel(logging.WARNING)


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """SQLAlchemy's pool logs a BaseException raised while it closes a connection ("Exception
    during reset or similar", with its traceback) and then re-raises it: a SIGTERM landing there
    printed that traceback above the command's one `interrupted` line."""
    return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


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


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM (what `kill`, service managers and batch schedulers send) handled as Ctrl-C is: a
    KeyboardInterrupt that unwinds every `finally` (the records committed are kept, worker
    processes and temporary directories removed). Yields the signals received, for the exit
    status; a second SIGTERM while unwinding is ignored, so the cleanup runs to its end. Ctrl-C,
    where SIGINT has Python's default handler (not where a shell starting a background job made
    it ignored), is raised every time as that handler raises it, and recorded too. The record is
    also `autosched.interrupts.received`, for as long as the handler is installed: native code
    can swallow the interrupt, and the long loops of a command raise it again (`check`).

    An interrupt that lands while a weakref callback or a `__del__` runs is swallowed by the
    interpreter ("Exception ignored in ..."), and the command would run on as if no signal came:
    the unraisable hook sees it and delivers it again, as a SIGTERM to this handler, where the
    main thread can unwind it (not as SIGINT: a command started in the background by a shell
    without job control has SIGINT ignored, and a SIGINT would be lost)."""
    received: list[int] = []
    swallowed: list[BaseException] = []  # an interrupt a finalizer swallowed, to raise again
    owner = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != owner:  # a forked builder inherits the handler: it dies as a signalled process does
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if swallowed:
            swallowed.clear()
            raise KeyboardInterrupt
        received.append(signum)
        if len(received) == 1 or signum == signal.SIGINT:
            raise KeyboardInterrupt

    def redeliver(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):  # from a thread: raised here, it would be lost again
            swallowed.append(unraisable.exc_value)
            threading.Timer(0.05, _thread.interrupt_main, (signal.SIGTERM,)).start()
        else:
            previous_hook(unraisable)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield received
        return
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, interrupt)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, interrupt)
    previous_hook, previous_received = sys.unraisablehook, interrupts.received
    sys.unraisablehook, interrupts.received = redeliver, received
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook, interrupts.received = previous_hook, previous_received


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _show_warnings()
    sweep_stale()  # what a kill -9 of an earlier command left
    with terminate_as_interrupt() as received:
        try:
            return args.run(args)
        except TuneInterrupted as exc:
            print(f"interrupted: {exc.kept} records kept in {exc.database}; run the same command again to resume "
                  "(nothing measured is measured again)", file=sys.stderr)
            return 128 + (received[0] if received else signal.SIGINT)
        except KeyboardInterrupt:
            if args.debug:
                raise
            print("interrupted", file=sys.stderr)
            return 128 + (received[0] if received else signal.SIGINT)
        except AutoschedError as exc:
            if args.debug:
                raise
            if received:  # native code (an extension's import) turned the interrupt into an error
                print("interrupted", file=sys.stderr)
                return 128 + received[0]
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            sweep_stale()  # the directories of builder processes killed on the way out


