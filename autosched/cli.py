"""The `autosched` command line.

Each subcommand is one entry of `COMMANDS`: a function that adds its
arguments and a function that runs it and returns the exit status.  The
command line only wires stages together; anything a user gets wrong
surfaces as an AutoschedError, printed as one `error: …` line (exit 2),
with the traceback only under `--debug`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from autosched.errors import AutoschedError
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


COMMANDS: dict[str, Command] = {
    "tasks": Command("list the tuning tasks of a model", _tasks_arguments, run_tasks),
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
        return args.run(args)
    except AutoschedError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
