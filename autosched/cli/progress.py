"""What a tune shows while it runs and when it ends.

`Tally` is the state (per task: trials, failures, best; overall: trials done of total, elapsed,
time left, and the tuned tasks' estimated latency Σ weight × best time, with how many tasks have
no best yet); the displays only render
it: a live table (rich) on a terminal, plain lines otherwise, JSON lines for scripts. A display
is a tuning callback with `start(plan)` and `finish()`, which `autosched.tune` calls.
"""
from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, JustifyMethod
from rich.live import Live
from rich.table import Table

from autosched.measure import MeasureInput, MeasureResult
from autosched.task import Task


def shape_text(task: Task) -> str:
    return " ".join("x".join(map(str, s)) for s in task.shapes)


@dataclass
class TaskTally:
    task: Task
    trials: int = 0
    failures: int = 0
    best: float = math.inf  # seconds; resumed records count

    @property
    def gflops(self) -> float:
        return self.task.flops / self.best / 1e9 if math.isfinite(self.best) and self.task.flops else 0.0


class Tally:
    """Counts for one tune, from its plan (bests resumed from the database) and measured batches."""

    def __init__(self, plan) -> None:
        self.total = plan.trials
        self.tasks = {t.key: TaskTally(t) for t in plan.tasks}
        for key, recs in plan.history.items():
            if key in self.tasks:
                self.tasks[key].best = min((res.cost for _, res in recs if res.ok), default=math.inf)
        self.done = 0
        self.started = time.monotonic()
        #: an emulated tune's costs are the static model's estimates, never shown as times
        self.static = bool(getattr(plan.target, "emulated", False))

    def best_text(self, seconds: float) -> str:
        """A best cost as the user reads it: ms measured, or the static model's estimate."""
        if not math.isfinite(seconds):
            return "-"
        return f"static estimate {seconds * 1e6:.4g} us" if self.static else f"{seconds * 1e3:.4g} ms"

    def add(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> TaskTally:
        t = self.tasks[inputs[0].task.key]
        for res in results:
            self.done += 1
            t.trials += 1
            if res.ok:
                t.best = min(t.best, res.cost)
            else:
                t.failures += 1
        return t

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def eta(self) -> float | None:
        """Seconds left at this run's pace so far; None before the first trial."""
        return self.elapsed / self.done * max(0, self.total - self.done) if self.done else None

    @property
    def latency(self) -> tuple[float, int]:
        """Σ weight × best over the tasks with a best, and how many of the tune's tasks have none
        yet. Not the model's latency: the tasks without a best, the kernels no template tunes and
        the executor are not in it (`autosched db best` adds them, from the model's own timings).
        Counting only the tasks measured so far, a 120-trial tune of a 36-task MNASNet showed
        "estimated model latency 1.9 ms" beside a built model of 6 ms."""
        tasks = self.tasks.values()
        return (sum(t.task.weight * t.best for t in tasks if math.isfinite(t.best)),
                sum(1 for t in tasks if not math.isfinite(t.best)))

    def snapshot(self) -> dict[str, Any]:
        latency, missing = self.latency
        model = {"static_estimate_us": latency * 1e6} if self.static else {"latency_ms": latency * 1e3}
        return {"done": self.done, "total": self.total, "elapsed_s": round(self.elapsed, 3),
                "eta_s": None if self.eta is None else round(self.eta, 3), **model, "tasks_without_best": missing}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    m, s = divmod(int(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}" if math.isfinite(seconds) else "-"


def summary_table(tally: Tally, title: str) -> Table:
    """Per task: op, shapes, weight, trials, failures, best ms, GFLOP/s; the totals in the caption."""
    table = Table(title=title, title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("op", "left"), ("shapes", "left"), ("weight", "right"), ("trials", "right"), ("failures", "right"),
        ("static estimate" if tally.static else "best ms", "right"), ("GFLOP/s", "right"))
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for t in tally.tasks.values():
        if t.trials or math.isfinite(t.best):
            table.add_row(t.task.op, shape_text(t.task), str(t.task.weight), str(t.trials), str(t.failures),
                          f"{t.best * 1e6:.4g} us" if tally.static and math.isfinite(t.best) else _ms(t.best),
                          f"{t.gflops:.1f}" if t.gflops and not tally.static else "-")
    latency, missing = tally.latency
    more = f" ({missing} of {len(tally.tasks)} tasks without a best yet)" if missing else ""
    table.caption = (f"trials {tally.done}/{tally.total}  elapsed {_duration(tally.elapsed)}  "
                     f"left {_duration(tally.eta)}  "
                     + (f"static estimate of the tuned tasks {latency * 1e6:.4g} us (no GPU timed it){more}"
                        if tally.static else f"estimated latency of the tuned tasks {latency * 1e3:.4g} ms{more}"))
    table.caption_justify = "left"
    return table


class _Display:
    """Common to displays: the tally, started by `start(plan)`."""

    tally: Tally

    def start(self, plan) -> None:
        self.tally = Tally(plan)

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """A batch measured: a display is one of `tune`'s callbacks (each display says how it shows it)."""
        raise NotImplementedError

    def finish(self) -> None:
        """The run ended (done, failed or interrupted)."""


class LiveProgress(_Display):
    """A table redrawn in place on a terminal (stderr), left on screen when the run ends."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._live: Live | None = None

    def start(self, plan) -> None:
        super().start(plan)
        _announce(plan, lambda text: self.console.print(text, highlight=False))
        self._live = Live(summary_table(self.tally, "tuning"), console=self.console, refresh_per_second=2)
        self._live.start()

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.tally.add(inputs, results)
        if self._live is None:
            raise RuntimeError("the live display is told results before start()")
        self._live.update(summary_table(self.tally, "tuning"))

    def finish(self) -> None:
        if self._live is not None:
            self._live.stop()


class LineProgress(_Display):
    """One plain line per measured batch (logs, pipes)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout

    def start(self, plan) -> None:
        super().start(plan)
        _announce(plan, lambda text: print(text, file=self.stream, flush=True))

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        t = self.tally.add(inputs, results)
        s = self.tally.snapshot()
        gflops = f" ({t.gflops:.1f} GFLOP/s)" if t.gflops and not self.tally.static else ""
        latency, missing = self.tally.latency
        more = f" ({missing} without a best)" if missing else ""
        print(f"[{s['done']}/{s['total']}] {t.task.op} {shape_text(t.task)}: {t.trials} trials, best "
              f"{self.tally.best_text(t.best)}{gflops}, {t.failures} failed | elapsed {_duration(self.tally.elapsed)}, "
              f"left {_duration(self.tally.eta)}, tuned tasks ~{self.tally.best_text(latency)}{more}",
              file=self.stream, flush=True)


class JsonLinesProgress(_Display):
    """One JSON object per event on stdout: start, each batch, and (from the CLI) the summary."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout

    def emit(self, event: str, **fields: Any) -> None:
        print(json.dumps({"event": event, **fields}), file=self.stream, flush=True)

    def start(self, plan) -> None:
        super().start(plan)
        self.emit("start", model=plan.model, target=str(plan.target), trials=plan.trials, database=plan.database,
                  resumed=plan.resumed, transferred=plan.transferred, pretrained=plan.pretrained)

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        t = self.tally.add(inputs, results)
        self.emit("batch", task=t.task.key, op=t.task.op, trials=t.trials, failures=t.failures,
                  **({"best_static_estimate_us": t.best * 1e6 if math.isfinite(t.best) else None} if self.tally.static
                     else {"best_ms": t.best * 1e3 if math.isfinite(t.best) else None, "gflops": t.gflops}),
                  **self.tally.snapshot())


class QuietProgress(_Display):
    """Counts without showing anything, for the summary at the end."""

    def __call__(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self.tally.add(inputs, results)


def _announce(plan, say) -> None:
    keys = {t.key for t in plan.tasks}
    say(f"database: {plan.database}")
    if plan.resumed:
        say(f"resuming from {plan.resumed} records of {sum(1 for k in plan.history if k in keys)} tasks")
    sources = [f"{plan.transferred} records of other workloads in the database" if plan.transferred else "",
               f"{plan.pretrained} records of the shipped training logs" if plan.pretrained else ""]
    if plan.transferred or plan.pretrained:
        say(f"cost models start trained on {' and '.join(filter(None, sources))}")
    if plan.caches != "warm":
        size = plan.weight_bytes
        weights = f"{size / 2**20:.1f} MiB" if size >= 1 << 20 else f"{size / 1024:.0f} KiB"
        say(f"timing kernels in {plan.caches} caches (the model's weights: {weights})")


def display_for(mode: str) -> _Display:
    """"auto" (live on a terminal, lines otherwise), "lines", "json-lines" or "quiet"."""
    if mode == "auto":
        mode = "live" if sys.stderr.isatty() else "lines"
    return {"live": LiveProgress, "lines": LineProgress, "json-lines": JsonLinesProgress,
            "quiet": QuietProgress}[mode]()
