"""What a graph costs on a target, for the substitution search: the sum of its tasks' kernel times.

A task's time is the tuning database's best record for it on this machine (or another CPU of
the same ISA) where one exists, else the shipped records' (as `build` falls back to them): the
time the built model will really spend in it. Otherwise
it is a roofline estimate from its FLOPs and the bytes it reads and writes, plus a fixed
launch cost per kernel (so merging kernels that read one input pays off and an extra copy does
not come free), scaled to the records (`GraphCost.scale`). Task costs are cached by task key; the tasks are those the build would run
(`finish` applies the rest of the pipeline to a candidate graph first).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from autosched.database import Database, tasks_digest
from autosched.database.queries import best, space_of
from autosched.graph.ir import Graph
from autosched.graph.passes.substitute import graph_digest
from autosched.graph.views import operand_views, view_shape
from autosched.measure.caches import MEMORY_BANDWIDTH
from autosched.target import CpuCapabilities, Target
from autosched.task import Task, extract_tasks

#: seconds every kernel costs besides its work (call, OpenMP fork/join, first touches)
LAUNCH_S = 4e-6
#: clock assumed for a CPU's peak FLOP rate
CLOCK_HZ = 3e9
#: GPU peak rates for cuda targets, whose capabilities carry no vector width
GPU_FLOPS, GPU_BANDWIDTH = 20e12, 1.5e12


class GraphCost:
    """Callable: a graph's time in seconds, its measured tasks' records plus its other tasks'
    roofline estimates scaled by `scale`: how much slower than their rooflines the tasks with
    records ran (total record time over total roofline, over every measured task seen). So once
    a rewritten graph's tasks are tuned, the graphs without records are not judged by an
    optimistic roofline against real measurements. A graph's two parts are cached by its
    digest, so calling again after more tasks were seen re-scores it with the final scale.
    `measured` and `estimated` count the tasks costed each way."""

    def __init__(self, target: Target, db: Database | None, finish: Callable[[Graph], Graph],
                 fallback: Database | None = None) -> None:
        self.target, self.db, self.finish, self.fallback = target, db, finish, fallback
        self.records: dict[str, float] = {}  # task key -> best record
        self.rooflines: dict[str, float] = {}  # task key -> estimate
        self.parts: dict[str, tuple[float, float, float]] = {}  # graph digest -> (records, other rooflines, rooflines)
        self.tunable: dict[str, bool] = {}  # task key -> whether a template tunes it here
        self.unmeasured: dict[str, int] = {}  # graph digest -> tunable tasks without a record
        self.task_sets: dict[str, str] = {}  # graph digest -> `tasks_digest` of its tasks, as a session keeps it

    @property
    def measured(self) -> int:
        return len(self.records)

    @property
    def estimated(self) -> int:
        return len(self.rooflines) - len(self.records)

    @property
    def scale(self) -> float:
        measured = sum(self.rooflines[k] for k in self.records)
        return sum(self.records.values()) / measured if measured else 1.0

    def __call__(self, graph: Graph) -> float:
        recorded, estimated, _ = self._parts(graph)
        return recorded + self.scale * estimated

    def roofline(self, graph: Graph) -> float:
        """The graph's time by rooflines alone, records aside: the same yardstick for every graph,
        so a rewrite cannot look cheaper merely by trading a task measured slow for an
        unmeasured one."""
        return self._parts(graph)[2]

    def measured_all(self, graph: Graph) -> bool:
        """Whether every tunable task of the graph has a record: then only the copies and other
        kernels no tuner times are estimated, alike in every graph."""
        self._parts(graph)
        return not self.unmeasured[graph_digest(graph)]

    def task_set(self, graph: Graph) -> str:
        """The `tasks_digest` of the tasks the graph builds: what a tuning session of it recorded."""
        self._parts(graph)
        return self.task_sets[graph_digest(graph)]

    def _parts(self, graph: Graph) -> tuple[float, float, float]:
        digest = graph_digest(graph)
        if digest not in self.parts:
            tasks = extract_tasks(self.finish(graph))
            self.task_sets[digest] = tasks_digest(t.key for t in tasks.tasks)
            recorded = estimated = total = 0.0
            unmeasured = 0
            for i in tasks.group_tasks:
                task = tasks.tasks[i]
                self._cost(task)
                total += self.rooflines[task.key]
                if task.key in self.records:
                    recorded += self.records[task.key]
                else:
                    estimated += self.rooflines[task.key]
                    unmeasured += self.tunable[task.key]
            self.parts[digest] = (recorded, estimated, total)
            self.unmeasured[digest] = unmeasured
        return self.parts[digest]

    def _cost(self, task: Task) -> None:
        if task.key in self.rooflines:
            return
        self.rooflines[task.key] = roofline(task, self.target)
        self.tunable[task.key] = space_of(task, self.target) is not None
        found = best(self.db, task, self.target) if self.db is not None else None
        if found is None and self.fallback is not None:  # the shipped records, as a build reads them
            found = best(self.fallback, task, self.target)
        if found is not None:
            self.records[task.key] = found.cost


def roofline(task: Task, target: Target) -> float:
    """The slower of computing the task's FLOPs at the target's peak and moving its bytes, plus
    the launch cost."""
    caps = target.capabilities
    if isinstance(caps, CpuCapabilities):
        peak = 2 * (2 if caps.fma else 1) * caps.lanes(4) * CLOCK_HZ * (os.cpu_count() or 1)
        bandwidth = MEMORY_BANDWIDTH
    else:
        peak, bandwidth = GPU_FLOPS, GPU_BANDWIDTH
    # an operand seen through a view is read only where the view looks (a Split's part of a
    # merged projection), not whole
    views = operand_views(task.attrs, len(task.input_values)) if task.op == "MatMul" else ((),) * len(task.input_values)
    nbytes = sum(math.prod(view_shape(v.shape, view)) * np.dtype(v.dtype).itemsize
                 for v, view in zip(task.input_values, views))
    nbytes += sum(math.prod(s) * np.dtype(d).itemsize for s, d in zip(task.out_shapes, task.out_dtypes))
    return LAUNCH_S + max(task.flops / peak, nbytes / bandwidth)
