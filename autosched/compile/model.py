"""Whole-model build: one shared library with every kernel and a graph executor in C.

Running the model makes no Python call per operator: `autosched_model_run` calls the kernels
in order with pointers into the caller's inputs and outputs, the weights (loaded once from a
file beside the library) and one arena whose offsets the memory planner chose. Identical tasks
share one compiled kernel. Stages that read only weights (a matmul's packed B panels, a
convolution's blocked filters) are computed once here, at build time, and stored in the
weights file in the layout the kernel reads, so inference never repacks a weight.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autosched.backend import backend_for
from autosched.codegen.gcc import compile_c
from autosched.compile.frontier import stage_reads, weight_only_frontier
from autosched.compile.kernel import build_kernel
from autosched.compile.weights import Arg, Weights
from autosched.compute import default_schedule, task_compute
from autosched.errors import AutoschedError
from autosched.graph.ir import Graph
from autosched.graph.passes import FusedGroup, fuse, optimize_for, plan_memory
from autosched.lower import PrimFunc, lower
from autosched.lower.ir import MAY_ALIAS, Store, walk_stmts
from autosched.runtime import Kernel
from autosched.runtime.model import MANIFEST_FORMAT, file_sha256
from autosched.schedule import Schedule, create_schedule
from autosched.target import CpuCapabilities, Target
from autosched.task import Task, extract_tasks
from autosched.te import Load, Tensor
from autosched.te.expr import walk
from autosched.templates import TemplateError, get_template

#: (task, target) -> (schedule, argument tensors); the tuning database supplies tuned ones
ScheduleFor = Callable[[Task, Target], tuple[Schedule, list]]


def default_kernel(task: Task, target: Target) -> tuple[Schedule, list]:
    """The untuned schedule of a task, the baseline tuning improves on: its template's fallback
    config where the template has one that applies, else the op library's default schedule."""
    try:
        template = get_template(task.op, target.kind)
        config = template.fallback(task, target)
        if config is not None:
            return template.apply(task, config, target)
    except TemplateError:
        pass  # no template for this op or these shapes/types: the op library's schedule
    return library_kernel(task, target)


def library_kernel(task: Task, target: Target) -> tuple[Schedule, list]:
    """The op library's default schedule of a task, with no template involved."""
    if target.ray_resource == "GPU":
        raise AutoschedError(f"task {task.key}: op {task.op} has no GPU template for target {target} "
                             "(the op library's schedules are CPU schedules)")
    args, outs = task_compute(task, target.capabilities)
    return default_schedule(task, outs, target.cpu_capabilities), args + outs


@dataclass(frozen=True)
class ModelFiles:
    library: Path
    manifest: Path
    weights: Path


@dataclass
class _KernelPlan:
    """One compiled kernel: for a task, given which of its inputs are weights."""
    func: PrimFunc
    folded: list  # (kernel computing one precomputed stage, positions of the weights it reads)
    used: list    # per parameter: whether the kernel reads it at all


def build_model(graph: Graph, out: Path, target: Target | str = "llvm",
                schedule_for: ScheduleFor = default_kernel, emulate: bool = False) -> ModelFiles:
    """Compile `graph` into `out` (a .so) with its manifest (.json) and weights (.weights) beside it.

    `emulate` (cuda targets): the GPU kernels run in the CPU emulation of the CUDA execution
    model, so the model is checked on a machine without a GPU.
    """
    target = Target.parse(target) if isinstance(target, str) else target
    backend = backend_for(target, emulate)
    graph = optimize_for(graph, target)
    groups = fuse(graph)
    taskset = extract_tasks(graph, groups)
    renderer = backend.renderer()
    weights = Weights()
    plans: dict[tuple, _KernelPlan] = {}
    calls = []
    planned: list[tuple[FusedGroup, _KernelPlan]] = []
    for group, task_index in zip(groups, taskset.group_tasks):
        names = group_arguments(group)
        n_in = len(names) - len(group.outputs)
        consts = tuple(i for i, n in enumerate(names[:n_in]) if n in graph.constants)
        key = (task_index, consts)
        if key not in plans:
            plans[key] = _plan_kernel(*schedule_for(taskset.tasks[task_index], target), consts, f"task{len(plans)}")
        plan = plans[key]
        args = [Arg(n) if used else Arg(None) for n, used in zip(names, plan.used)]
        for k, (pre, positions) in enumerate(plan.folded):
            # named by the kernel and the weights it reads: groups that share both (the steps of an
            # unrolled recurrence) share one copy, read from cache instead of one copy per step
            folded = f"{renderer.symbol(plan.func)}:folded{k}:{','.join(names[p] for p in positions)}"
            if folded not in weights.offsets:
                weights.add(folded, _run_precompute(pre, [graph.constants[names[p]] for p in positions]))
            args.append(Arg(folded))
        calls.append((group, renderer.symbol(plan.func), args))
        planned.append((group, plan))
    for name in dict.fromkeys(a.name for _, _, args in calls for a in args
                                 if a.name is not None and a.name in graph.constants):
        weights.add(name, graph.constants[name])
    for v in graph.outputs:
        if v.name in graph.constants:
            weights.add(v.name, graph.constants[v.name])
    memory = plan_memory(graph, groups, in_place=target.kind == "llvm")
    for group, plan in planned:  # a kernel run in place reads and writes one buffer through two pointers
        source = group.anchor.inputs[0]
        if memory.aliases.get(group.outputs[0]) == memory.aliases.get(source, source):
            plan.func.attrs[MAY_ALIAS] = True
    funcs = [p.func for p in plans.values()]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    binary = backend.binary_target(target)  # the emulation is a program for this CPU
    source, library = backend.model_library(graph, calls, funcs, renderer, weights, memory, binary)
    isa_flags = sorted(binary.capabilities.flags) if isinstance(binary.capabilities, CpuCapabilities) else []
    shutil.copyfile(library, out)
    files = ModelFiles(out, out.with_suffix(".json"), out.with_suffix(".weights"))
    files.weights.write_bytes(weights.blob)
    files.manifest.write_text(json.dumps({
        "format": MANIFEST_FORMAT, "library": out.name, "weights": files.weights.name,
        "weights_bytes": len(weights.blob), "weights_sha256": hashlib.sha256(weights.blob).hexdigest(),
        "library_bytes": out.stat().st_size, "library_sha256": file_sha256(out),
        "target": str(target), "emulated": backend.emulated, "isa": binary.isa, "isa_flags": isa_flags,
        "inputs": [_value_json(v) for v in graph.inputs],
        "outputs": [_value_json(v) for v in graph.outputs],
        "tasks": [{"key": t.key, "weight": t.weight} for t in taskset.tasks],
        "kernels": [{"symbol": renderer.symbol(p.func), "task": key[0], "precomputed_stages": len(p.folded)}
                    for key, p in plans.items()],
        # the weight bytes a call reads: in a model whose weights exceed the cache, read from memory at every run
        "calls": [{"op": group.anchor.op.value, "group": group.name, "task": task_index,
                   "weight_bytes": sum(weights.sizes[n] for n in {a.name for a in args} if n in weights.sizes)}
                  for (group, _, args), task_index in zip(calls, taskset.group_tasks)],
    }, indent=1))
    out.with_suffix(backend.source_suffix).write_text(source)
    return files


def _value_json(v) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype}


def group_arguments(group: FusedGroup) -> list[str]:
    """Value names a group's kernel takes, in the order of `Task.input_values`, then its outputs."""
    inside = set(group.anchor.outputs)
    extras: list[str] = []
    for node in group.epilogue:
        extras.extend(name for name in node.inputs if name not in inside)
        inside.update(node.outputs)
    return list(group.anchor.inputs) + extras + list(group.outputs)


# --- folding stages that read only weights ----------------------------------------------------

def _plan_kernel(sched: Schedule, args: list[Tensor], consts: tuple[int, ...], name: str) -> _KernelPlan:
    """Lower the kernel with its weight-only stages precomputed (extra arguments after the outputs)."""
    const_ops = {id(args[i].op) for i in consts}
    folded = []
    for st in weight_only_frontier(sched, const_ops):
        sched.precompute(st)
        t = Tensor(st.op)
        sources = [i for i in consts if stage_reads(st, args[i])]
        folded.append((t, sources))
    func = lower(sched, list(args) + [t for t, _ in folded], name)
    read = _params_read(func)
    used = [id(b) in read for b in func.params[:len(args)]]
    pre = [(_precompute_kernel(t, [args[i] for i in sources]), sources) for t, sources in folded]
    return _KernelPlan(func, pre, used)


def weight_positions(graph: Graph, taskset) -> dict[int, tuple[int, ...]]:
    """Task index → positions of its kernel inputs that are weights in `graph` (as the first
    group running that task has them): what a build folds at build time."""
    out: dict[int, tuple[int, ...]] = {}
    for group, index in zip(taskset.groups, taskset.group_tasks):
        names = group_arguments(group)
        inputs = names[:len(names) - len(group.outputs)]
        out.setdefault(index, tuple(i for i, n in enumerate(inputs) if n in graph.constants))
    return out


def kernel_as_built(sched: Schedule, args: list[Tensor], consts: tuple[int, ...], target: Target,
                    inputs: list[np.ndarray]) -> tuple[Kernel, list[np.ndarray]]:
    """A task's kernel compiled as a model build compiles it, its weight-only stages (a matmul's
    packed B) computed once from `inputs`: (kernel, the precomputed arrays, which follow the
    outputs among its arguments). What per-kernel timings should measure: the build never
    repacks a weight at run time."""
    plan = _plan_kernel(sched, args, consts, "task")
    backend = backend_for(target)
    renderer = backend.renderer()
    code = renderer.render(plan.func)
    kernel = Kernel(compile_c(code, backend.flags(target)), renderer.symbol(plan.func), plan.func.params, code)
    return kernel, [_run_precompute(pre, [inputs[p] for p in positions]) for pre, positions in plan.folded]


def _params_read(func: PrimFunc) -> set[int]:
    read = set()
    for s in walk_stmts(func.body):
        if isinstance(s, Store):
            read.add(id(s.buffer))
            read.update(id(x.source) for x in walk(s.value) if isinstance(x, Load))
            read.update(id(x.source) for x in walk(s.index) if isinstance(x, Load))
    return read


def _precompute_kernel(t: Tensor, sources: list[Tensor]) -> Kernel:
    """A weight-packing kernel, run once here at build time: built for this host, whatever the
    model's target."""
    s = create_schedule(t)
    s.parallel_outermost()
    return build_kernel(s, sources + [t], "precompute")


def _run_precompute(kernel: Kernel, arrays: list[np.ndarray]) -> np.ndarray:
    args = [np.ascontiguousarray(a) for a in arrays] + [kernel.empty_args()[-1]]
    kernel(*args)
    return args[-1]
