"""Callbacks that watch a tuning run: each receives every measured batch."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from autosched.measure import MeasureInput, MeasureResult, record_to_json


class ProgressDisplay:
    """One line per batch: trials so far, best time (and GFLOP/s when the task
    knows its FLOPs), failures so far."""

    def __init__(self, total: int | None = None, stream: TextIO | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.trials = 0
        self.failures = 0
        self.best = math.inf

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for res in results:
            self.trials += 1
            if res.ok:
                self.best = min(self.best, res.cost)
            else:
                self.failures += 1
        key = inputs[0].task.key
        of = f"/{self.total}" if self.total is not None else ""
        best = "none yet"
        if math.isfinite(self.best):
            best = f"{self.best * 1e3:.4g} ms"
            flops = getattr(inputs[0].task, "flops", None)
            if isinstance(flops, (int, float)) and flops > 0:
                best += f" ({flops / self.best / 1e9:.4g} GFLOP/s)"
        self.stream.write(f"[{key}] trials {self.trials}{of}  best {best}  failures {self.failures}\n")
        self.stream.flush()


class JsonLinesLog:
    """Appends one JSON record per measurement to `path`; the file is opened per
    batch, so a crash loses at most the batch in flight and never half a line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = path

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        lines = "".join(json.dumps(record_to_json(i, r), sort_keys=True) + "\n" for i, r in zip(inputs, results))
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(lines)
