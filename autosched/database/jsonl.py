"""JSON lines, the interchange format: `db import` reads them (today's tuning logs included),
`db export` writes them. One measurement per line; a line that is not one is refused naming
its file and line, before anything is stored."""
from __future__ import annotations

import gzip
import json
import logging
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from autosched.database.identity import TargetInfo
from autosched.database.store import Database
from autosched.database.stored import StoredRecord
from autosched.errors import AutoschedError
from autosched.measure import MeasureResult, RecordError
from autosched.target import Target

log = logging.getLogger("autosched.database")

_OPTIONAL = {"flops": int, "tuner": str, "version": str, "node": str, "run_s": float, "compiler": str}


class LogError(AutoschedError):
    """A JSON-lines file that cannot be imported; the message names the file and line."""


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[StoredRecord]:
    """Every record of one file (`.jsonl`, or gzip-compressed `.jsonl.gz`), in order. Lines from
    before the database (no hardware fingerprint) are taken as measured on this host, as the logs
    of `tune --log` were, unless they name another ISA."""
    try:
        data = Path(path).read_bytes()
        lines = (gzip.decompress(data) if str(path).endswith(".gz") else data).decode("utf-8").splitlines()
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as e:
        raise LogError(f"{path}: cannot read the tuning records: {getattr(e, 'strerror', None) or e}") from None
    hosts: dict[str, TargetInfo] = {}
    for number, line in enumerate(lines, 1):
        if line.strip():
            yield _parse(line, f"{path}:{number}", hosts)


def _parse(line: str, where: str, hosts: dict[str, TargetInfo]) -> StoredRecord:
    try:
        rec = json.loads(line)
        key, target, config = rec["task"], rec["target"], rec["config"]
        result = MeasureResult.from_json(rec)
        if not (isinstance(key, str) and isinstance(target, str) and isinstance(config, dict)
                and isinstance(config.get("template"), str) and isinstance(config.get("space"), str)):
            raise TypeError("task, target and config (with template and space) have the wrong types")
        body = json.loads(key)
        op, shapes = body["op"], json.dumps([s for s, _ in body["in"]])
        extra = {}
        for name, kind in _OPTIONAL.items():
            value = rec.get(name)
            extra[name] = None if value is None else kind(value)
        isa, fingerprint, compiler = rec.get("isa"), rec.get("fingerprint"), extra.pop("compiler")
        if not isinstance(isa, (str, type(None))) or not isinstance(fingerprint, (str, type(None))):
            raise TypeError("isa and fingerprint must be strings")
        if target not in hosts:
            hosts[target] = TargetInfo.of(Target.parse(target))
        info = hosts[target]
        if fingerprint is not None and isa is not None:
            info = TargetInfo(target, fingerprint, isa, compiler)
        elif isa is not None and isa != info.isa:  # a log line of another machine's ISA, CPU unknown
            info = TargetInfo(target, f"{isa}|unknown CPU", isa, compiler)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecordError, AutoschedError) as e:
        raise LogError(f"{where}: not a measurement record ({type(e).__name__}: {e})") from None
    return StoredRecord(key=key, op=op, shapes=shapes, config=config, target=info, result=result, **extra)


def import_jsonl(db: Database, path: str | os.PathLike[str]) -> tuple[int, int]:
    """Store a file's records (all of them, or none if a line is malformed); returns (lines, new)."""
    stored = list(read_jsonl(path))
    return len(stored), db.insert(stored)


def export_jsonl(db: Database, out: TextIO, isa: str | None = None, sample: int | None = None) -> int:
    """Write every record (of one ISA class, if given) as one JSON line; returns how many.
    `sample`: at most that many records per task and machine, spread evenly over their ranking
    (see `spread`)."""
    chosen = [s for s in db.stored() if isa is None or s.target.isa == isa]
    if sample is not None:
        chosen = spread(chosen, sample)
    for s in chosen:
        out.write(json.dumps(s.to_json(), sort_keys=True) + "\n")
    return len(chosen)


def spread(stored: list[StoredRecord], per_task: int) -> list[StoredRecord]:
    """At most `per_task` records of each (task, space, machine), at evenly spaced ranks from
    the fastest to the slowest and failed: what teaches a cost model a whole ranking (the best
    records alone cannot), in a file small enough to ship. Order is kept."""
    if per_task < 1:
        raise ValueError(f"a sample needs at least one record per task, not {per_task}")
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, s in enumerate(stored):
        groups.setdefault((s.key, s.space, s.target.fingerprint), []).append(i)
    keep: set[int] = set()
    for members in groups.values():
        ranked = sorted(members, key=lambda i: stored[i].result.cost if stored[i].result.ok else math.inf)
        if len(ranked) <= per_task:
            keep.update(ranked)
        else:
            step = (len(ranked) - 1) / max(per_task - 1, 1)
            keep.update(ranked[round(k * step)] for k in range(per_task))
    return [s for i, s in enumerate(stored) if i in keep]
