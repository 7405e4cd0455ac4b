"""`autosched.tune` and `autosched.build`: the tune → build workflow over the tuning database.

These are the only orchestration: the command line parses arguments, calls them and prints.
`tune` resumes from what the database holds for the model's tasks on this machine (nothing is
measured twice; cost models start trained on those records and on records of the same
templates from other workloads) and commits every measurement as it is measured. Tunes that
run at once on one database claim each config before measuring it (`database/claims.py`), so
none is measured twice, and learn from each other's records as they arrive.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autosched.backend import backend_for
from autosched.compile.model import ModelFiles, build_model
from autosched.database import (
    Best,
    ClaimStats,
    Database,
    RecordWriter,
    SharedTuning,
    TunedSchedules,
    history,
    latest_record,
    pretraining,
    shipped_database,
    tasks_digest,
    training_database,
)
from autosched.database.model_times import context_factors
from autosched.errors import AutoschedError, TuneInterrupted
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Graph
from autosched.graph.passes import optimize_for
from autosched.measure import Builder, Runner
from autosched.measure.caches import model_caches
from autosched.model_check import SHORTLIST, ModelCheck, check_in_model
from autosched.substitution import SubstitutionReport, substitute
from autosched.target import Target
from autosched.task import Task, extract_tasks

if TYPE_CHECKING:
    from autosched.task_scheduler import ScheduleSummary
    from autosched.tuner.base import Callback

log = logging.getLogger("autosched")

PathLike = str | os.PathLike[str]
DatabaseLike = Database | PathLike | None


@contextlib.contextmanager
def open_database(db: DatabaseLike, read_only: bool = False) -> Iterator[Database]:
    """The caller's Database as is, or one opened (and closed after) from a path, URL or the
    default; `read_only` for callers that only read (they then work on a file they cannot write)."""
    if isinstance(db, Database):
        yield db
        return
    database = Database(db, read_only=read_only)
    try:
        yield database
    finally:
        database.close()


def prepare_graph(model: PathLike, target: Target | str = "llvm", shapes: Mapping[str, Sequence[int]] | None = None,
                  *, substitutions: bool = True, db: DatabaseLike = None,
                  shipped: bool | PathLike = True) -> tuple[Graph, SubstitutionReport]:
    """The model imported and, with `substitutions`, rewritten by the verified graph substitutions
    wherever that lowers the sum of its kernels' times on `target` (from `db` where it has them,
    else from the shipped records as `build` reads them, see `shipped`, else estimated), with
    what the optimizer did."""
    target = Target.parse(target) if isinstance(target, str) else target
    graph = load_onnx(model, dict(shapes or {}))
    if not substitutions:
        return graph, SubstitutionReport(note="off (--no-substitutions)")
    fallback = _shipped(shipped, shipped_database)
    with open_database(db, read_only=True) as database:
        return substitute(graph, target, database, fallback=fallback)


def model_tasks(model: PathLike, target: Target | str = "llvm",
                shapes: Mapping[str, Sequence[int]] | None = None, *, substitutions: bool = True,
                db: DatabaseLike = None, shipped: bool | PathLike = True) -> tuple[Graph, list[Task]]:
    """The model imported (and rewritten by the substitutions, see `prepare_graph`), and the
    deduplicated tasks its build for `target` runs (the graph is optimized and its layout
    planned for the target, as `build_model` does)."""
    target = Target.parse(target) if isinstance(target, str) else target
    graph, _ = prepare_graph(model, target, shapes, substitutions=substitutions, db=db, shipped=shipped)
    return graph, list(extract_tasks(optimize_for(graph, target)).tasks)


@dataclass(frozen=True)
class TunePlan:
    """What a tune starts from, given to every callback that has a `start(plan)` method (progress
    displays): the tasks, the budget, the database and the records it resumes from."""

    model: str
    target: Target
    tasks: tuple[Task, ...]
    trials: int
    database: str
    history: Mapping[str, Sequence]  # task key → records (other keys: transfer)
    resumed: int
    transferred: int  # records of other workloads in the database the cost models start trained on
    caches: str = "warm"  # the cache mode candidates are timed in (`autosched.measure.caches`)
    weight_bytes: int = 0  # the model's weights, which decide it under "auto"
    pretrained: int = 0  # records of the shipped training logs they also start trained on


@dataclass(frozen=True)
class TuneOutcome:
    database: str
    session: int
    resumed: int       # this model's records the run started from
    transferred: int   # records of other workloads its cost models started trained on
    summary: ScheduleSummary
    claims: ClaimStats  # configs it claimed, and those other tuners held or had measured
    database_s: float   # spent in the database: claims, others' records, commits
    model_check: ModelCheck | None  # the tuned build against the untuned one in the model (None: not checked)
    pretrained: int = 0  # records of the shipped training logs its cost models started trained on


def resumable(tasks: Sequence[Task], target: Target, db: Database,
              training: Database | None = None) -> tuple[dict, int, int, int]:
    """The history `tune_tasks` resumes from, with its own record count, those transferred from
    other workloads of `db` and those of the `training` logs (`autosched.database.pretraining`)."""
    found = history(db, tasks, target)
    keys = {t.key for t in tasks}
    own = sum(len(recs) for key, recs in found.items() if key in keys)
    transferred = sum(map(len, found.values())) - own
    extra = pretraining(training, tasks, target, found) if training is not None else {}
    return {**found, **extra}, own, transferred, sum(map(len, extra.values()))


def tune(model: PathLike, target: Target | str = "llvm", trials: int = 1000, *, db: DatabaseLike = None,
         tuner: str = "xgb", round_trials: int = 16, seed: int = 0, scheduler: str = "gradient",
         shapes: Mapping[str, Sequence[int]] | None = None,
         builder: Builder | None = None, runner: Runner | None = None, emulate: bool = False,
         callbacks: Sequence[Callback] = (), substitutions: bool = True, model_check: bool = True,
         ab_tasks: int = 3, caches: str = "warm", shipped: bool | PathLike = True,
         shortlist: int = SHORTLIST) -> TuneOutcome:
    """Spend `trials` new measurements on `model`'s tasks and commit each to `db` (a Database, a
    path or URL; None: `AUTOSCHED_DB` or the per-user file). Candidates are built and timed by
    the target's back end on this machine (gcc and the CPU worker; nvcc and the GPU worker for
    cuda) unless a builder or runner is passed in, which stays the caller's. `emulate` (cuda
    targets): candidates are built as the CPU emulation and checked there, proving them correct
    without a GPU, ranked by the static model of the GPU kernel
    (`autosched.measure.static_model`) and recorded under the emulated target
    (`Target.as_emulated`). Ctrl-C raises TuneInterrupted after marking the session interrupted.
    Callbacks with `start(plan)` / `finish()` methods (progress displays) are told when the run
    begins (a `TunePlan`) and ends, however it ends. `substitutions`: the tasks are those of the
    graph the verified substitutions rewrite the model into (see `prepare_graph`), as `build`
    builds it. `model_check` (targets measured on this machine's CPU or GPU): the tune ends by timing the
    tuned build against the untuned one in the model, after timing there each task's `shortlist`
    fastest configs kernel by kernel and A/B-testing the `ab_tasks` tuned configs with the
    largest estimated gains (`autosched.model_check`); configs that lose are kept out of builds.
    `caches` (CPU targets and GPUs, not the emulation): the cache state candidates are timed in
    (`autosched.measure.caches`: warm, cold, flushed, or "auto": cold where the model's weights
    exceed the last-level cache of what runs them, this machine's or the GPU's L2, else warm). A runner passed in that cannot change how it times keeps its own
    way under "auto". `shipped` (True: the package's `tuning_logs/`, a directory, or False for
    none): its records stand in for tasks the database has none for when graphs are costed and
    the model checked, as in `build`, and its training logs warm-start the cost models with other
    workloads' measurements of the same ISA class where the database has fewer than
    `autosched.database.queries.TRANSFER_LIMIT` per template."""
    from autosched.task_scheduler import check_arguments, tune_tasks
    check_arguments(trials, tuner, scheduler)
    target = Target.parse(target) if isinstance(target, str) else target
    backend = backend_for(target, emulate)
    # the model is timed here: only where the candidates were too, by this back end's own runner
    # (a CPU, or a GPU here; the CUDA emulation times nothing)
    model_check = model_check and runner is None and not backend.emulated
    with backend.measuring(builder, runner) as (builder, runner):
        target = runner.measured_target(target)  # records name the device it measures on (the GPU's model)
        if backend.emulated:  # costs are static estimates: records apart from every GPU timing
            target = target.as_emulated()
        with open_database(db) as database:
            try:
                graph, tasks = model_tasks(model, target, shapes, substitutions=substitutions, db=database,
                                           shipped=shipped)
                weight_bytes = sum(a.nbytes for a in graph.constants.values())
                timed_in = _time_in(runner, target, backend.emulated, caches, weight_bytes)
                since = latest_record(database)
                training = _shipped(shipped, training_database)
                found, own, transferred, pretrained = resumable(tasks, target, database, training)
                context = context_factors(database, tasks, target) if model_check else {}
            except KeyboardInterrupt:  # before anything was measured (the graph search can take seconds)
                session = database.start_session(str(model), target, trials)
                raise TuneInterrupted(database.end_session(session, "interrupted"), database.location) from None
            plan = TunePlan(str(model), target, tuple(tasks), trials, database.location, found, own, transferred,
                            timed_in, weight_bytes, pretrained)
            for callback in callbacks:
                if hasattr(callback, "start"):
                    callback.start(plan)
            session = database.start_session(str(model), target, trials, tasks_digest(t.key for t in tasks))
            status = "failed"
            writer = RecordWriter(database, session, tuner)
            try:
                with SharedTuning(database, session, since) as peers:
                    summary = tune_tasks(tasks, target, trials, builder, runner, tuner, round_trials,
                                         [writer, *callbacks], seed, found, scheduler, peers, context)
                checked = (_check_in_model(model, graph, tasks, target, database, ab_tasks, runner, session, shipped,
                                           shortlist) if model_check else None)
                status = "done"
            except KeyboardInterrupt:
                status = "interrupted"
                raise TuneInterrupted(database.end_session(session, status), database.location) from None
            finally:
                for callback in callbacks:
                    if hasattr(callback, "finish"):
                        callback.finish()
                if status != "interrupted":
                    database.end_session(session, status)
            return TuneOutcome(database.location, session, own, transferred, summary, peers.stats,
                               peers.stats.seconds + writer.seconds, checked, pretrained)


def _time_in(runner: Runner, target: Target, emulated: bool, caches: str, weight_bytes: int) -> str:
    """Set `runner` to time in the cache mode `caches` resolves to for this model; the mode it times in."""
    if emulated:
        if caches not in ("auto", "warm"):
            raise AutoschedError(f"the CUDA emulation times nothing, so it has no cache modes; {target} "
                                 f"kernels are estimated as they run warm (timing in {caches} caches needs a GPU)")
        return "warm"
    mode = model_caches(caches, weight_bytes, runner.cache_bytes())
    if runner.time_in(mode):
        return mode
    if caches != "auto":
        raise AutoschedError(f"this runner ({type(runner).__name__}) times kernels warm only; "
                             f"it cannot time them in {caches} caches")
    return "warm"


def _shipped(shipped: bool | PathLike, load: Callable[[PathLike | None], Database | None]) -> Database | None:
    """What `load` reads from the shipped directory `shipped` names (True: the package's own,
    False: none)."""
    if shipped is False:
        return None
    return load(None if shipped is True else shipped)


def _check_in_model(model: PathLike, graph: Graph, tasks: list[Task], target: Target, database: Database,
                    ab_tasks: int, runner: Runner, session: int, shipped: bool | PathLike,
                    shortlist: int) -> ModelCheck | None:
    """The model check after a tune; one that cannot build or run the model is a warning, never a
    failed tune: every record is committed by then."""
    fallback = _shipped(shipped, shipped_database)
    try:
        return check_in_model(graph, tasks, target, database, fallback, ab_tasks,
                              threads=getattr(getattr(runner, "options", None), "threads", None), session=session,
                              shortlist=shortlist)
    except AutoschedError as e:
        log.warning("%s: the model check after tuning could not run, the records are kept: %s", model, e)
        return None


@dataclass(frozen=True)
class BuildOutcome:
    files: ModelFiles
    tasks: int
    used: Mapping[str, Best]  # task key → the database record its kernel was built from
    other_isa: Mapping[str, set[str]]  # task key → ISAs that have its only records (not applied)
    shipped: frozenset[str]  # tasks whose record came from the shipped records
    declined: Mapping[str, Best]  # task key → its best record, built on the default instead (see TunedSchedules)
    superseded: Mapping[str, Best] = field(default_factory=dict)  # → its best record, built with an in-model winner

    @property
    def tuned(self) -> int:
        """Tasks built with a config from the database."""
        return len(self.used)


def build(model: PathLike, target: Target | str = "llvm", *, db: DatabaseLike = None, output: PathLike | None = None,
          shapes: Mapping[str, Sequence[int]] | None = None, shipped: bool | PathLike = True,
          emulate: bool = False, substitutions: bool = True) -> BuildOutcome:
    """Compile `model` into the library `output` (default: the model's path with .so; manifest and
    weights beside it), each task with its best valid config in `db` (this machine first, else
    the same ISA), else in the shipped records (`shipped`: True for the package's, a directory
    of JSON-lines files, or False for none), else its default schedule, compiled by the target's
    back end. `emulate` (cuda targets): the kernels run in the CPU emulation, for checking a model
    without a GPU. `substitutions`: build the graph the verified substitutions rewrite the model
    into (see `prepare_graph`)."""
    target = Target.parse(target) if isinstance(target, str) else target
    output = Path(model).with_suffix(".so") if output is None else output
    graph, tasks = model_tasks(model, target, shapes, substitutions=substitutions, db=db, shipped=shipped)
    fallback = _shipped(shipped, shipped_database)
    with open_database(db, read_only=True) as database:
        schedules = TunedSchedules(database, fallback)
        try:
            files = build_model(graph, Path(output), target, schedules, emulate=emulate)
        except OSError as e:
            raise AutoschedError(f"{output}: cannot write the built model: {e.strerror or e}") from None
    return BuildOutcome(files, len(tasks), dict(schedules.used), dict(schedules.other_isa),
                        frozenset(schedules.from_fallback), dict(schedules.declined), dict(schedules.superseded))
