"""Which stages of a schedule read only weights: what a model build computes once, at build
time, and what a timing precomputes before it times the rest (`measure/fold.py`), so both
agree on what a kernel does at run time."""
from __future__ import annotations

from autosched.schedule import Attach, Schedule, Stage
from autosched.te import Tensor
from autosched.te.tensor import Operation, PlaceholderOp


def weight_only_frontier(sched: Schedule, const_ops: set[int]) -> list[Stage]:
    """Stages computed from weights alone whose values a weight-dependent stage (or output) reads."""
    const: dict[int, bool] = {}
    outputs = {id(sched.stage_of(o)) for o in sched.outputs}
    for st in sched.stages:  # producers first
        ins = st.op.inputs()
        # a stage computed inside another's loops (a shared-memory tile) is part of that nest
        const[id(st)] = bool(ins) and id(st) not in outputs and st.attach is Attach.ROOT and all(
            id(t.op) in const_ops if sched.stage_of(t) is None else const.get(id(sched.stage_of(t)), False) for t in ins)
    frontier = []
    for st in sched.stages:
        if not const[id(st)]:
            for t in st.op.inputs():
                src = sched.stage_of(t)
                if src is not None and const[id(src)] and src not in frontier:
                    frontier.append(src)
    return frontier


def stage_reads(st: Stage, placeholder: Tensor) -> bool:
    todo: list[Operation] = [st.op]
    seen: set[int] = set()
    while todo:
        op = todo.pop()
        if id(op) in seen:
            continue
        seen.add(id(op))
        for t in op.inputs():
            if t.op is placeholder.op:
                return True
            if not isinstance(t.op, PlaceholderOp):
                todo.append(t.op)
    return False


__all__ = ["stage_reads", "weight_only_frontier"]
