"""Rows back into records of tasks: what a tuning run resumes from and what a build uses.

Every config read here is validated against its task's space before anything is built from it
(a database may come from anywhere): a record from another space version or outside its space
is skipped with a warning naming it. Records never cross an ISA class; the best config of a
task comes from this exact machine when it has one, else from the same ISA on another CPU
model, with one notice.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, func, not_, or_, select

from autosched.database.identity import is_emulated, isa_of
from autosched.database.schema import records, targets, workloads
from autosched.database.store import Database, result_of
from autosched.database.stored import config_text
from autosched.errors import AutoschedError
from autosched.measure import MeasureInput, Record, TaskLike
from autosched.space import Config, ConfigSpace
from autosched.target import Target
from autosched.task import Task, task_from_key
from autosched.templates import TemplateError, get_template

log = logging.getLogger("autosched.database")

#: records of other workloads a cost model is warm-started with, per template (newest first)
TRANSFER_LIMIT = 2048
#: fastest records of a task read at first when looking for its best valid one
BEST_CANDIDATES = 32


def space_of(task: Task, target: Target) -> ConfigSpace | None:
    """The task's space on `target`, None for an op without a template there."""
    try:
        return get_template(task.op, target.kind).space(task, target)
    except TemplateError:
        return None


#: rows of CPU-emulation run times that versions before `Target.as_emulated` stored under a cuda
#: target's fingerprint (`cuda|sm_80`, naming no GPU): never read as timings
_OLD_EMULATION_TIMES = and_(targets.c.fingerprint.like("cuda|%"), not_(targets.c.fingerprint.like("cuda|%|%")))


def _rows(db: Database, *where, limit: int | None = None, order=records.c.id):
    query = (select(records, workloads.c.key, workloads.c.space, workloads.c.flops, workloads.c.template,
                    targets.c.fingerprint)
             .join(workloads, records.c.workload_id == workloads.c.id)
             .join(targets, records.c.target_id == targets.c.id).where(*where)
             .order_by(order).limit(limit))
    with db.reading() as conn:
        return conn.execute(query).mappings().all()


def _describe(task: TaskLike) -> str:
    return f"{task.op} {'x'.join(map(str, task.shapes[0])) if task.shapes else ''}".strip()


def _config(row, space: ConfigSpace, task: TaskLike, db: Database) -> Config | None:
    try:
        return space.from_json(json.loads(row["config"]))
    except (AutoschedError, ValueError) as e:
        log.warning("%s: record %d (%s) skipped: %s", db.location, row["id"], _describe(task), e)
        return None


def _usable(db: Database, rows, task: Task, space: ConfigSpace):
    """(row, config) for each row of `task` whose config is valid in `space`; the others are
    skipped with a warning naming them (a whole other space version in one line)."""
    other_space = 0
    for row in rows:
        if row["space"] != space.fingerprint:
            other_space += 1
            continue
        config = _config(row, space, task, db)
        if config is not None:
            yield row, config
    if other_space:
        log.warning("%s: %d records of task %s skipped: measured in another space version (the template or "
                    "target changed since)", db.location, other_space, _describe(task))


def history(db: Database, tasks: Sequence[Task], target: Target) -> dict[str, list[Record]]:
    """Task key → records to resume from: each task's own records measured on this exact machine,
    plus (under other keys) records of the same templates on other workloads of the same ISA,
    which model-based tuners train on before their first trial."""
    spaces = {t.key: s for t in tasks if (s := space_of(t, target)) is not None}
    by_key = {t.key: t for t in tasks if t.key in spaces}
    rows: dict[str, list] = {}
    for row in _rows(db, workloads.c.key.in_(by_key), targets.c.fingerprint == target.fingerprint,
                     not_(_OLD_EMULATION_TIMES)):
        rows.setdefault(row["key"], []).append(row)
    out: dict[str, list[Record]] = {}
    for key, task_rows in rows.items():
        task = by_key[key]
        for row, config in _usable(db, task_rows, task, spaces[key]):
            out.setdefault(key, []).append((MeasureInput(task, target, config), result_of(row)))
    for template in {s.template for s in spaces.values()}:
        _transfer(db, template, target, set(by_key), out, TRANSFER_LIMIT)
    return out


def pretraining(training: Database, tasks: Sequence[Task], target: Target,
                found: dict[str, list[Record]]) -> dict[str, list[Record]]:
    """Records of `training` (the shipped training logs) that a tune's cost models also start
    trained on, beside `found` (`history` of the user's database): per template of `tasks`, those
    of the same ISA class on workloads that neither the tune nor `found` has, up to
    `TRANSFER_LIMIT` transferred records in all. The user's own machine comes first."""
    spaces = {t.key: s for t in tasks if (s := space_of(t, target)) is not None}
    transferred: dict[str, int] = {}
    for key, recs in found.items():
        if key not in spaces and recs:
            template = recs[0][0].config.space.template
            transferred[template] = transferred.get(template, 0) + len(recs)
    out: dict[str, list[Record]] = {}
    for template in sorted({s.template for s in spaces.values()}):
        room = TRANSFER_LIMIT - transferred.get(template, 0)
        if room > 0:
            _transfer(training, template, target, set(spaces) | set(found), out, room)
    return out


def latest_record(db: Database) -> int:
    """The id of the newest record (0 in an empty database): where `recorded_since` starts."""
    with db.reading() as conn:
        return conn.execute(select(func.max(records.c.id))).scalar() or 0


def recorded_since(db: Database, task: TaskLike, space: ConfigSpace, target: Target, after: int,
                   session: int | None) -> tuple[list[Record], int]:
    """Records of `task` in `space` on this machine committed after record id `after` by sessions
    other than `session` (other tuners at work beside it), and the id to ask from next time."""
    rows = _rows(db, workloads.c.key == task.key, workloads.c.space == space.fingerprint,
                 targets.c.fingerprint == target.fingerprint, records.c.id > after,
                 or_(records.c.session_id.is_(None), records.c.session_id != session))
    out = []
    for row in rows:
        config = _config(row, space, task, db)
        if config is not None:
            out.append((MeasureInput(task, target, config), result_of(row)))
    return out, max((row["id"] for row in rows), default=after)


def _transfer(db: Database, template: str, target: Target, exclude: set[str], out: dict[str, list[Record]],
              limit: int) -> None:
    rows = _rows(db, workloads.c.template == template, workloads.c.key.not_in(exclude), targets.c.isa == isa_of(target),
                 not_(_OLD_EMULATION_TIMES), limit=limit, order=records.c.id.desc())
    spaces: dict[tuple[str, str], ConfigSpace | None] = {}
    for row in reversed(rows):
        if (row["key"], row["space"]) not in spaces:
            try:
                task = task_from_key(row["key"], row["flops"] or 0)
            except ValueError:
                spaces[(row["key"], row["space"])] = None
                continue
            space = space_of(task, target)
            spaces[(row["key"], row["space"])] = space if space and space.fingerprint == row["space"] else None
        space = spaces[(row["key"], row["space"])]
        if space is None:
            continue  # another space version: no use for transfer, and nothing to warn a user about
        try:
            config = space.from_json(json.loads(row["config"]))
        except (AutoschedError, ValueError):
            continue
        task = task_from_key(row["key"], row["flops"] or 0)
        out.setdefault(row["key"], []).append((MeasureInput(task, target, config), result_of(row)))


#: a record's cache mode, records from before modes were recorded counting as the warm ones they were
_CACHES = func.coalesce(records.c.caches, "warm")


@dataclass(frozen=True)
class Best:
    """A task's fastest valid config, where it was measured and in which cache mode."""

    config: Config
    cost: float
    record: int
    fingerprint: str
    caches: str = "warm"

    @property
    def static_estimate(self) -> bool:
        """Whether `cost` is the static model's estimate from an emulated tune, not a timing."""
        return is_emulated(self.fingerprint)


def best(db: Database, task: Task, target: Target, among: frozenset[str] | None = None) -> Best | None:
    """The fastest valid record of `task` on this machine, else on another device of the same ISA
    (`Best.fingerprint` says which), else, for a cuda target, the best static estimate of an
    emulated tune (`Best.static_estimate`), else None. Emulation run times of older versions
    (stored under `cuda|sm_XX`) are never read. Times of different cache modes are not
    comparable (a cold timing is slower by the weights' loads): the fastest is taken among the
    records of the mode the task's newest record was timed in, how it was last tuned.
    `among`: only records of these configs (as `config_text` writes them)."""
    space = space_of(task, target)
    if space is None:
        return None
    common = (workloads.c.key == task.key, records.c.cost.is_not(None), not_(_OLD_EMULATION_TIMES),
              *(() if among is None else (records.c.config.in_(among),)))
    tiers = [(targets.c.fingerprint == target.fingerprint,),
             (targets.c.isa == isa_of(target), targets.c.fingerprint != target.fingerprint)]
    if target.kind == "cuda" and not target.emulated:
        tiers.append((targets.c.fingerprint == target.as_emulated().fingerprint,))
    for where in tiers:
        newest = _rows(db, *common, *where, limit=1, order=records.c.id.desc())
        if not newest:
            continue
        mode = newest[0]["caches"] or "warm"
        # the fastest few first: one of them is almost always valid, and a task may have thousands
        for limit in (BEST_CANDIDATES, None):
            rows = _rows(db, *common, *where, _CACHES == mode, limit=limit, order=records.c.cost)
            for row, config in _usable(db, rows, task, space):
                return Best(config, row["cost"], row["id"], row["fingerprint"], mode)
            if limit is not None and len(rows) < limit:
                break
    return None


def fastest(db: Database, task: Task, target: Target, count: int, exclude: frozenset[str] = frozenset(),
            faster_than: Config | None = None) -> list[Config]:
    """The `count` fastest distinct valid configs of `task` timed on this machine, in the cache
    mode of its newest record, leaving out `exclude` (as `config_text` writes them) and those
    no faster than `faster_than`'s fastest timing where it has one: the shortlist the model
    check times in the model."""
    space = space_of(task, target)
    if space is None or count <= 0:
        return []
    common = (workloads.c.key == task.key, records.c.cost.is_not(None), targets.c.fingerprint == target.fingerprint)
    newest = _rows(db, *common, limit=1, order=records.c.id.desc())
    if not newest:
        return []
    mode = newest[0]["caches"] or "warm"
    bound = None if faster_than is None else config_cost(db, task, target, faster_than, mode)
    out: list[Config] = []
    seen = set(exclude)
    rows = _rows(db, *common, _CACHES == mode, *(() if bound is None else (records.c.cost < bound,)),
                 order=records.c.cost)
    for _, config in _usable(db, rows, task, space):
        text = config_text(config.to_json())
        if text not in seen:
            seen.add(text)
            out.append(config)
            if len(out) == count:
                break
    return out


def other_isas(db: Database, task: Task, target: Target) -> set[str]:
    """The ISA classes, other than the target's, that hold successful records of `task`."""
    query = (select(targets.c.isa).distinct().join(records, records.c.target_id == targets.c.id)
             .join(workloads, records.c.workload_id == workloads.c.id)
             .where(workloads.c.key == task.key, records.c.cost.is_not(None), targets.c.isa != isa_of(target)))
    with db.reading() as conn:
        return set(conn.execute(query).scalars())


def config_cost(db: Database, task: Task, target: Target, config: Config, caches: str = "warm") -> float | None:
    """The fastest timing of one config of `task` measured on this machine in cache mode `caches`
    (None if never timed so): what a tuned config is weighed against, for the default config of
    its task."""
    return fastest_record(db, task, target, config_text(config.to_json()), caches)


def fastest_record(db: Database, task: Task, target: Target, config: str, caches: str = "warm") -> float | None:
    """`config_cost` of a config as the records table keys it (`config_text`)."""
    query = (select(func.min(records.c.cost)).join(workloads, records.c.workload_id == workloads.c.id)
             .join(targets, records.c.target_id == targets.c.id)
             .where(workloads.c.key == task.key, targets.c.fingerprint == target.fingerprint,
                    records.c.config == config, records.c.cost.is_not(None), _CACHES == caches))
    with db.reading() as conn:
        return conn.execute(query).scalar_one()
