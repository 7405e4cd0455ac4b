"""`autosched db ...`: look into and move tuning records (import, export, stats, best, merge,
prune). JSON lines are the interchange format; the database is the store of record."""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import os
import sys

from autosched.api import model_tasks
from autosched.cli.args import add_db_argument, add_model_arguments
from autosched.database import Database, LogError, TunedSchedules, best, export_jsonl, read_jsonl, shipped_database
from autosched.database.location import is_url
from autosched.database.model_times import ModelEstimate, estimate
from autosched.errors import AutoschedError
from autosched.target import Target


def _date(text: str) -> float:
    """`2026-11-01` or `2026-11-01T12:00` (UTC unless it says otherwise) → Unix time."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-01 or 2026-11-01T12:00") from None
    return (when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)).timestamp()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    actions = {
        "import": ("store the records of JSON-lines files (today's tuning logs included)", _import),
        "export": ("write every record as JSON lines", _export),
        "stats": ("count records, workloads, targets and sessions", _stats),
        "best": ("each task's best record for a model on this machine", _best),
        "merge": ("copy another database's records into this one (no duplicates)", _merge),
        "prune": ("drop failed or superseded records older than a date", _prune),
    }
    for name, (text, run) in actions.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks")
        add_db_argument(p)
        p.set_defaults(db_run=run)
        if name == "import":
            p.add_argument("files", nargs="+", metavar="FILE.jsonl")
        elif name == "export":
            p.add_argument("-o", "--output", default="-", metavar="FILE.jsonl", help="default: standard output")
            p.add_argument("--isa", help="only records of this ISA class, e.g. x86_64-avx2")
            p.add_argument("--sample", type=_positive, metavar="N",
                           help="at most N records per task and machine, spread over their ranking (a training "
                                "log for cost models); an output ending in .gz is compressed")
        elif name == "stats":
            p.add_argument("--json", action="store_true", help="print one JSON object")
        elif name == "best":
            add_model_arguments(p)
        elif name == "merge":
            p.add_argument("other", metavar="OTHER.db")
        else:
            p.add_argument("--before", type=_date, required=True, metavar="DATE", help="e.g. 2026-11-01")


#: the actions that only read the database: they open it read-only
_READING = ("export", "stats", "best")


def run(args: argparse.Namespace) -> int:
    with contextlib.closing(Database(args.db, read_only=args.db_command in _READING)) as db:
        return args.db_run(db, args)


def _import(db, args) -> int:
    """Every file is read before anything is stored: one bad line refuses them all."""
    try:
        files = [(path, list(read_jsonl(path))) for path in args.files]
    except LogError as e:
        raise LogError(f"0 imported: {e}") from None
    for path, stored in files:
        print(f"{path}: {len(stored)} records, {db.insert(stored)} new, into {db.location}")
    return 0


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of records, not {text!r}")
    return int(text)


def _export(db, args) -> int:
    if args.output == "-":
        n = export_jsonl(db, sys.stdout, args.isa, args.sample)
        print(f"wrote {n} records to standard output", file=sys.stderr)
        return 0
    opener = gzip.open if args.output.endswith(".gz") else open
    try:
        with opener(args.output, "wt", encoding="utf-8") as f:
            n = export_jsonl(db, f, args.isa, args.sample)
    except OSError as e:
        raise AutoschedError(f"{args.output}: cannot write the export: {e.strerror}") from None
    print(f"wrote {n} records to {args.output}", file=sys.stderr)
    return 0


def _stats(db, args) -> int:
    stats = db.stats()
    if args.json:
        print(json.dumps(stats))
    else:
        for key, value in stats.items():
            print(f"{key:15} {value}")
    return 0


def _best(db, args) -> int:
    target = Target.parse(args.target).on_this_gpu()  # a GPU's records and timings carry its name
    _, tasks = model_tasks(args.model, target, dict(args.shape), db=db)
    schedules = TunedSchedules(db, shipped_database())  # as `autosched build` chooses
    built = {task.key: schedules.choose(task, target) for task in tasks}
    model = estimate(db, tasks, target, built)
    print(f"{'op':<10} {'weight':>6} {'best ms':>9} {'GFLOP/s':>8} {'record':>7}  shapes / where")
    total, static = 0.0, 0
    for task, part in zip(tasks, model.tasks):
        found = best(db, task, target)
        shapes = ",".join("x".join(map(str, s)) for s in task.shapes)
        seen = "" if part.in_model_ms is None else f"  (in the model {part.in_model_ms / task.weight:.4g} ms)"
        if found is None:
            print(f"{task.op:<10} {task.weight:>6} {'-':>9} {'-':>8} {'-':>7}  {shapes}{seen}")
            continue
        if found.static_estimate:  # a model's figure, never added to measured times
            static += 1
            print(f"{task.op:<10} {task.weight:>6} {'-':>9} {'-':>8} {found.record:>7}  {shapes}  (no GPU timing; "
                  f"static estimate {found.cost * 1e6:.4g} us from an emulated tune)")
            continue
        total += task.weight * found.cost
        where = "" if found.fingerprint == target.fingerprint else f"  (measured on {found.fingerprint})"
        if found.caches != "warm":
            where += f"  (timed in {found.caches} caches)"
        if task.key in schedules.declined:
            where += "  (built on its default: it lost in the model or won alone by too little)"
        elif (chosen := built[task.key]) is not None and task.key in schedules.superseded:
            where += (f"  (built with record {chosen.record}, {chosen.cost * 1e3:.4g} ms, the fastest config the model "
                      f"judged a win: this one lost there or won alone by too little)")
        print(f"{task.op:<10} {task.weight:>6} {found.cost * 1e3:>9.4g} {task.flops / found.cost / 1e9:>8.1f} "
              f"{found.record:>7}  {shapes}{where}{seen}")
    print(f"estimated latency of the tuned tasks: {total * 1e3:.4g} ms"
          + (f" ({static} tasks have static estimates only, not counted)" if static else ""))
    _print_estimate(model)
    return 0


def _print_estimate(model: ModelEstimate) -> None:
    """The latency model's parts beside the last timed build, so the unexplained share shows."""
    unknown = f", {model.unknown} tasks never timed" if model.unknown else ""
    print(f"estimated latency of the build: {model.total_ms:.4g} ms = records scaled to the model "
          f"{model.records_ms:.4g} (alone {model.alone_ms:.4g}) + other kernels in the model {model.others_ms:.4g} + "
          f"executor {model.executor_ms:.4g}{unknown}")
    timed = model.measured
    if timed is None:
        print("no build of this model was timed here yet ('autosched tune' ends by timing one)")
        return
    print(f"last timed build here: {timed.tuned_ms:.4g} ms ({timed.threads} threads; untuned {timed.untuned_ms:.4g} ms; "
          f"its kernels {timed.kernels_ms:.4g} ms over {timed.calls} calls); estimate / build "
          f"{model.total_ms / timed.tuned_ms:.2f}")
    split = ", ".join(f"{op} {est:.4g}/{seen:.4g}" for op, (est, seen) in model.by_op().items())
    print(f"by op, estimated / in the model (ms): {split}")


def _merge(db, args) -> int:
    """The other database is opened read-only: a merge never creates or changes its source."""
    if not is_url(args.other):
        if not os.path.exists(args.other):
            raise AutoschedError(f"{args.other}: no such file; nothing merged")
        if os.path.isfile(args.other) and os.path.getsize(args.other) == 0:
            raise AutoschedError(f"{args.other}: an empty file, not a tuning database; nothing merged")
    with contextlib.closing(Database(args.other, read_only=True)) as other:
        n = db.merge(other)
    print(f"{n} new records from {args.other} into {db.location}")
    return 0


def _prune(db, args) -> int:
    n = db.prune(args.before)
    print(f"pruned {n} failed or superseded records from {db.location}")
    return 0
