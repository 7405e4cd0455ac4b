"""Tasks as tensor expressions: a task's op record builds its computation and default schedule.

A task's kernel takes the anchor's operands, then the epilogue's extra tensors (the order of
`Task.input_values`), and writes the group's output. The epilogue, a small DAG of elementwise
ops over the anchor's result, becomes one scalar function fused into the anchor's output stage.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autosched import te
from autosched.ops.epilogue import EpilogueFn
from autosched.opset.record import ComputeArgs, OpKind, UnsupportedTaskError
from autosched.opset.registry import lookup
from autosched.schedule import Schedule
from autosched.target import Capabilities, CpuCapabilities
from autosched.task import EpilogueOp, Task
from autosched.te import Expr, Tensor


def epilogue_fn(epilogue: Sequence[EpilogueOp], extras: Sequence[Tensor]) -> EpilogueFn | None:
    """One scalar function computing the whole epilogue DAG from the anchor's value."""
    if not epilogue:
        return None
    steps_of = []
    for e in epilogue:
        record = lookup(e.op)
        if record.scalar is None or record.operand_load is None:
            raise UnsupportedTaskError(f"epilogue op {e.op} has no compute definition")
        steps_of.append((e, record.scalar, record.operand_load))

    def fn(v: Expr, idx: tuple) -> Expr:
        steps = [v]
        it = iter(extras)
        for e, scalar, load in steps_of:
            args = [steps[o.step] if o.step is not None else load(next(it), idx, k) for k, o in enumerate(e.operands)]
            steps.append(scalar(args, dict(e.attrs)))
        return steps[-1]
    return fn


def task_compute(task: Task, caps: Capabilities) -> tuple[list[Tensor], list[Tensor]]:
    """(argument placeholders, output tensors) of the task's computation; the matmul panels it
    packs into are sized for `caps`."""
    record = lookup(task.op)
    values = task.input_values
    placeholders = [te.placeholder(v.shape, v.dtype, name=v.name) for v in values]
    ins, extras = placeholders[:len(task.shapes)], placeholders[len(task.shapes):]
    epi = epilogue_fn(task.epilogue, extras)
    if epi is not None and record.kind not in (OpKind.ANCHOR, OpKind.ELEMWISE):
        raise UnsupportedTaskError(f"{task.op} takes no fused epilogue")
    outs = record.compute(ComputeArgs(dict(task.attrs), tuple(ins), task.out_shapes, epi, caps))
    for o, shape in zip(outs, task.out_shapes):
        if tuple(o.shape) != tuple(shape):
            raise UnsupportedTaskError(f"{task.op}: computed shape {list(o.shape)} differs from the graph's {list(shape)}")
    return placeholders, outs


def default_schedule(task: Task, outs: list[Tensor], caps: CpuCapabilities) -> Schedule:
    """The untuned baseline schedule of a task's computation, vectorized for `caps`: as many
    lanes as one vector holds of the widest type the task reads, computes or writes. A kernel
    writing bytes from float32 (a quantizing chain's uint8) ran 64 lanes of float, four vectors
    per operation, whose clamps and narrowing gcc 12 then compiled lane by lane: 1.6 ns an
    element, where 16 lanes take one vmaxps and one vpmovdb per vector."""
    widest = max(np.dtype(dtype).itemsize for dtype in (*task.dtypes, *task.out_dtypes,
                                                       *(step.dtype for step in task.epilogue)))
    vector_lanes = caps.lanes(widest)
    return lookup(task.op).schedule(outs, vector_lanes)
