"""Arguments several subcommands share: the model and its shapes, the target, the database."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


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
    parser.add_argument("--no-substitutions", dest="substitutions", action="store_false",
                        help="compile the graph as imported, without the verified graph substitutions")


def add_build_db_arguments(parser: argparse.ArgumentParser) -> None:
    """--db and --no-shipped, for the commands that build a model."""
    add_db_argument(parser)
    parser.add_argument("--no-shipped", action="store_true",
                        help="ignore the records shipped with autosched (used for tasks the database has none for)")


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (a file or SQLAlchemy URL; default: $AUTOSCHED_DB, else "
                             "$XDG_DATA_HOME/autosched/tuning.db)")

