"""What a tune shows while it runs: plain lines per measured batch (the CLI's default for now)."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from autosched.measure import MeasureInput, MeasureResult


class TextProgress:
    """One line when the tune starts (database, what it resumes from), one per measured batch."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout

    def start(self, plan) -> None:
        keys = {t.key for t in plan.tasks}
        tasks = sum(1 for k in plan.history if k in keys)
        print(f"database: {plan.database}", file=self.stream)
        if plan.resumed:
            print(f"resuming from {plan.resumed} records of {tasks} tasks", file=self.stream)
        if plan.transferred:
            print(f"cost models start trained on {plan.transferred} records of other workloads", file=self.stream)
        self.stream.flush()

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        ok = [r.cost for r in results if r.ok]
        best = f"{min(ok) * 1e3:.4g} ms" if ok else "no success"
        print(f"  {inputs[0].task.op:<10} {len(results):3d} trials, batch best {best}, "
              f"{len(results) - len(ok)} failed", file=self.stream, flush=True)
