"""`autosched report`: one self-contained HTML file on what tuning did, from the database.

Figures (matplotlib, PNG embedded as data URIs): best GFLOP/s against trials per task, the
model's estimated latency (Σ weight × best time) against trials, where tuning time went, and
error kinds per template; then the per-task table. Records are those measured on the target's
machine (its hardware fingerprint), in the order they were committed.
"""
from __future__ import annotations

import base64
import html
import io
import math
import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from autosched.database import Database, StoredRecord, TunedSchedules, shipped_database, tasks_digest
from autosched.database.identity import is_emulated
from autosched.database.model_times import estimate
from autosched.errors import AutoschedError
from autosched.target import Target
from autosched.task import Task


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise AutoschedError("the report needs matplotlib: pip install 'autosched[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _pyplot().close(fig)
    return f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _label(r: StoredRecord) -> str:
    return f"{r.op} {r.shapes}"


def _curves(recs: Sequence[StoredRecord], weights: dict[str, int]) -> tuple[str, str]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    by_task: dict[str, list[StoredRecord]] = defaultdict(list)
    for r in recs:
        by_task[r.key].append(r)
    for task_recs in by_task.values():
        flops = task_recs[0].flops  # one task key, one flop count
        if not flops:  # no rate to plot (every record of the task lacks it)
            continue
        best, xs, ys = math.inf, [], []
        for n, r in enumerate(task_recs, 1):
            if r.result.ok and r.flops:
                best = min(best, r.result.cost)
            if math.isfinite(best):
                xs.append(n)
                ys.append(flops / best / 1e9)
        if xs:
            ax.plot(xs, ys, label=_label(task_recs[0])[:48])
    ax.set(xlabel="trials of the task", ylabel="best GFLOP/s", title="Tuning curves")
    if len(by_task) <= 12:
        ax.legend(fontsize=7)
    curves = _png(fig)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bests: dict[str, float] = {}
    xs, ys = [], []
    for n, r in enumerate(recs, 1):
        if r.result.ok:
            bests[r.key] = min(bests.get(r.key, math.inf), r.result.cost)
        if bests:
            xs.append(n)
            ys.append(1e3 * sum(weights.get(k, 1) * c for k, c in bests.items()))
    ax.plot(xs, ys)
    ax.set(xlabel="trials", ylabel="ms", title="Estimated model latency (Σ weight × best, tasks measured so far)")
    return curves, _png(fig)


def _time_and_errors(recs: Sequence[StoredRecord], sessions: list[dict]) -> tuple[str, str]:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    wall = sum((s["ended"] or s["started"]) - s["started"] for s in sessions)
    parts = {"building (sum over parallel builds)": sum(r.result.build_s for r in recs),
             "timing kernels (repeats)": sum(sum(r.result.costs) for r in recs),
             "cost model and search (tuners)": sum(s["search_s"] for s in sessions),
             "sessions' wall time": wall}
    ax.barh(list(parts), list(parts.values()))
    ax.set(xlabel="seconds", title="Where tuning time went")
    time_png = _png(fig) + "<p>" + "; ".join(f"{html.escape(k)}: {v:.1f} s" for k, v in parts.items()) + "</p>"
    fig, ax = plt.subplots(figsize=(6, 3))
    kinds = Counter((r.template, r.result.error_kind.name) for r in recs if not r.result.ok)
    labels = [f"{t}: {k}" for t, k in kinds] or ["no failures"]
    ax.barh(labels, list(kinds.values()) or [0])
    ax.set(xlabel="records", title="Error kinds per template")
    return time_png, _png(fig)


def _table(recs: Sequence[StoredRecord], weights: dict[str, int]) -> str:
    rows = []
    keys = dict.fromkeys(r.key for r in recs)
    for key in keys:
        mine = [r for r in recs if r.key == key]
        ok = [r.result.cost for r in mine if r.result.ok]
        best = min(ok) if ok else math.inf
        gflops = f"{mine[0].flops / best / 1e9:.1f}" if ok and mine[0].flops else "-"
        cells = [mine[0].op, mine[0].shapes, weights.get(key, 1), len(mine), len(mine) - len(ok),
                 f"{best * 1e3:.4g}" if ok else "-", gflops]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in ("op", "shapes", "weight", "trials", "failures", "best ms", "GFLOP/s"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _latency_model(db: Database, tasks: Sequence[Task], target: Target) -> str:
    """The latency model's estimate of the build by part and by op, beside the last timed build."""
    schedules = TunedSchedules(db, shipped_database())  # as `autosched build` chooses
    model = estimate(db, tasks, target, {t.key: schedules.choose(t, target) for t in tasks})
    unknown = f" ({model.unknown} tasks never timed)" if model.unknown else ""
    text = (f"estimate {model.total_ms:.4g} ms = records scaled to the model {model.records_ms:.4g} (alone "
            f"{model.alone_ms:.4g}) + other kernels in the model {model.others_ms:.4g} + executor "
            f"{model.executor_ms:.4g}{unknown}; ")
    timed = model.measured
    text += ("no build of this model was timed here yet" if timed is None else
             f"last timed build here {timed.tuned_ms:.4g} ms (untuned {timed.untuned_ms:.4g} ms), "
             f"estimate / build {model.total_ms / timed.tuned_ms:.2f}")
    rows = "".join(f"<tr><td>{html.escape(op)}</td><td>{est:.4g}</td><td>{seen:.4g}</td></tr>"
                   for op, (est, seen) in model.by_op().items())
    return (f"<h2>Latency model</h2><p>{html.escape(text)}</p><table><tr><th>op</th><th>estimated ms</th>"
            f"<th>in the last profiled build ms</th></tr>{rows}</table>")


def _tuned(session: dict, model: str | None, tasks: Sequence[Task]) -> bool:
    """Whether a session tuned this model: by its tasks, wherever the model's file lies (sessions
    from before schema 4 know only the path they were given)."""
    if session["tasks"] is None:
        return session["model"] == model
    return session["tasks"] == tasks_digest(t.key for t in tasks)


def write_report(db: Database, out: str | os.PathLike[str], target: Target, model: str | None = None,
                 tasks: Sequence[Task] | None = None, substitutions: str | None = None) -> int:
    """Write the report for `model`'s `tasks` (None: every workload) on `target`'s machine, with
    the line saying what the graph substitutions did to the model; returns the number of records
    it covers."""
    title = model or "all workloads"
    weights = {t.key: t.weight for t in tasks} if tasks is not None else {}
    recs = [r for r in db.stored() if r.target.fingerprint == target.fingerprint
            and not is_emulated(r.target.fingerprint) and (tasks is None or r.key in weights)]
    if not recs:
        raise AutoschedError(f"{db.location}: no records for {title} on this machine ({target})")
    curves, latency = _curves(recs, weights)
    time_png, errors = _time_and_errors(recs, [s for s in db.sessions() if tasks is None or _tuned(s, model, tasks)])
    body = (f"<h1>autosched tuning report: {html.escape(title)}</h1><p>database {html.escape(db.location)}, "
            f"target {html.escape(str(target))}, {len(recs)} records</p>"
            + (f"<p>{html.escape(substitutions)}</p>" if substitutions else "")
            + f"{curves}{latency}{time_png}{errors}"
            + (_latency_model(db, tasks, target) if tasks is not None else "")
            + f"<h2>Tasks</h2>{_table(recs, weights)}")
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>autosched report</title><style>"
            "body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px;text-align:right}"
            "</style></head><body>" + body + "</body></html>")
    try:
        Path(out).write_text(page, encoding="utf-8")
    except OSError as e:
        raise AutoschedError(f"{out}: cannot write the report: {e.strerror}") from None
    return len(recs)
