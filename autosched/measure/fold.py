"""Measure what a built model runs: stages that read only weights are precomputed, not timed.

A model build (`autosched.compile.model`) computes the stages that read only constants (packed
weights, Winograd's transformed filters) once, at build time, and the kernel takes them as
arguments. Timing a candidate with those stages inside would charge it for work the model never
does at run time: Winograd's weight transform made ResNet-18's 512-channel 7×7 layers look 2×
slower than the direct algorithm when built they are 0.6× (benchmarks/winograd.py), so the
tuner kept the slower algorithm. Here the builder precomputes the same frontier the build does
and compiles each precomputed stage as its own small kernel; the runner's worker runs those
on the task's inputs before it checks and times the candidate.

Which inputs are weights is a graph fact: MatMul and Gemm tasks carry it (their
`weight_inputs` attribute, set at task extraction); for convolutions, whose filter and bias are
constants in every model the frontend builds, `CONSTANT_INPUTS` names them. Other ops are timed
whole. Before matmuls were folded, tuning timed B's repacking with each candidate, so the MLP's
best records favoured panels cheap to pack, and its tuned build ran slower than the untuned one
(0.56 against 1.05 ms after 1000 trials, AVX-512, 2 threads).
"""
from __future__ import annotations

from dataclasses import dataclass

from autosched.compile.frontier import stage_reads, weight_only_frontier
from autosched.lower import PrimFunc, lower
from autosched.measure.record import TaskLike
from autosched.schedule import Schedule, create_schedule
from autosched.task import WEIGHT_INPUTS_ATTR
from autosched.te import Tensor

#: per op, the anchor inputs (by position) that are constants in a model
CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {"Conv": (1, 2), "ConvNCHWc": (1, 2)}


@dataclass(frozen=True)
class FoldedStage:
    """One precomputed stage: its kernel (computing it from `sources`, positions among the
    candidate's inputs) and the tensor it becomes, an extra argument after the outputs."""

    func: PrimFunc
    sources: tuple[int, ...]


def constant_inputs(task: TaskLike) -> tuple[int, ...]:
    marked = dict(getattr(task, "attrs", ())).get(WEIGHT_INPUTS_ATTR, CONSTANT_INPUTS.get(task.op, ()))
    return tuple(i for i in marked if i < len(task.shapes))


def fold_weights(sched: Schedule, args: list[Tensor], task: TaskLike) -> tuple[list[Tensor], list[FoldedStage]]:
    """Mark the weight-only frontier of `sched` precomputed, as `autosched.compile.model` does; returns
    the candidate's arguments (inputs, outputs, then the precomputed tensors) and their kernels."""
    consts = constant_inputs(task)
    if not consts:
        return list(args), []
    folded: list[FoldedStage] = []
    extra: list[Tensor] = []
    for st in weight_only_frontier(sched, {id(args[i].op) for i in consts}):
        sched.precompute(st)
        t = Tensor(st.op)
        sources = tuple(i for i in consts if stage_reads(st, args[i]))
        pre = create_schedule(t)
        pre.parallel_outermost()  # as build's precompute kernels
        folded.append(FoldedStage(lower(pre, [args[i] for i in sources] + [t], f"precompute{len(folded)}"), sources))
        extra.append(t)
    return list(args) + extra, folded
