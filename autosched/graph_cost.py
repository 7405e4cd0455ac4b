"""What a graph costs on a target, for the substitution search: the sum of its tasks' kernel times.

A task's time is the tuning database's best record for it on this machine (or another CPU of
the same ISA) where one exists: the time the built model will really spend in it. Otherwise
it is a roofline estimate from its FLOPs and the bytes it reads and writes, plus a fixed
launch cost per kernel, so merging kernels that read one input pays off and an extra copy does
not come free. Task costs are cached by task key; the tasks are those the build would run
(`finish` applies the rest of the pipeline to a candidate graph first).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable

import numpy as np

from autosched.database import Database
from autosched.database.queries import best
from autosched.graph.ir import Graph
from autosched.target import CpuCapabilities, Target
from autosched.task import Task, extract_tasks

#: seconds every kernel costs besides its work (call, OpenMP fork/join, first touches)
LAUNCH_S = 4e-6
#: bytes per second a kernel streams from memory
BANDWIDTH = 20e9
#: clock assumed for a CPU's peak FLOP rate
CLOCK_HZ = 3e9
#: GPU peak rates for cuda targets, whose capabilities carry no vector width
GPU_FLOPS, GPU_BANDWIDTH = 20e12, 1.5e12


class GraphCost:
    """Callable: a graph's estimated time in seconds. `measured` counts the task costs that came
    from the database, `estimated` those from the roofline."""

    def __init__(self, target: Target, db: Database | None, finish: Callable[[Graph], Graph]) -> None:
        self.target, self.db, self.finish = target, db, finish
        self.cache: dict[str, float] = {}
        self.measured = self.estimated = 0

    def __call__(self, graph: Graph) -> float:
        tasks = extract_tasks(self.finish(graph))
        return sum(self.task_cost(tasks.tasks[i]) for i in tasks.group_tasks)

    def task_cost(self, task: Task) -> float:
        if task.key not in self.cache:
            found = best(self.db, task, self.target) if self.db is not None else None
            if found is not None:
                self.measured += 1
                self.cache[task.key] = found.cost
            else:
                self.estimated += 1
                self.cache[task.key] = roofline(task, self.target)
        return self.cache[task.key]


def roofline(task: Task, target: Target) -> float:
    """The slower of computing the task's FLOPs at the target's peak and moving its bytes, plus
    the launch cost."""
    caps = target.capabilities
    if isinstance(caps, CpuCapabilities):
        peak = 2 * (2 if caps.fma else 1) * caps.lanes(4) * CLOCK_HZ * (os.cpu_count() or 1)
        bandwidth = BANDWIDTH
    else:
        peak, bandwidth = GPU_FLOPS, GPU_BANDWIDTH
    nbytes = sum(v.nbytes for v in task.input_values)
    nbytes += sum(math.prod(s) * np.dtype(d).itemsize for s, d in zip(task.out_shapes, task.out_dtypes))
    return LAUNCH_S + max(task.flops / peak, nbytes / bandwidth)
