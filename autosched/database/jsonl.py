"""JSON lines, the interchange format: `db import` reads them (today's tuning logs included),
`db export` writes them. One measurement per line; a line that is not one is refused naming
its file and line, before anything is stored."""
from __future__ import annotations

import json
import logging
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
    """Every record of one file, in order. Lines from before the database (no hardware
    fingerprint) are taken as measured on this host, as the logs of `tune --log` were, unless
    they name another ISA."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
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


def export_jsonl(db: Database, out: TextIO, isa: str | None = None) -> int:
    """Write every record (of one ISA class, if given) as one JSON line; returns how many."""
    n = 0
    for s in db.stored():
        if isa is not None and s.target.isa != isa:
            continue
        out.write(json.dumps(s.to_json(), sort_keys=True) + "\n")
        n += 1
    return n
