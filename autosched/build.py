"""Whole-model build: one shared library with every kernel and a graph executor in C.

Running the model makes no Python call per operator: `autosched_model_run` calls the kernels
in order with pointers into the caller's inputs and outputs, the weights (loaded once from a
file beside the library) and one arena whose offsets the memory planner chose. Identical tasks
share one compiled kernel.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from autosched.codegen import renderer_for
from autosched.codegen.c import C_TYPES
from autosched.codegen.gcc import compile_c
from autosched.compute import default_schedule, task_compute
from autosched.graph.ir import Graph
from autosched.graph.passes import FusedGroup, fuse, optimize, plan_memory
from autosched.lower import lower
from autosched.schedule import Schedule
from autosched.task import Task, extract_tasks
from autosched.target import Target

WEIGHT_ALIGN = 64
#: (task, target) -> (schedule, argument tensors); the tuning database supplies tuned ones
ScheduleFor = Callable[[Task, Target], tuple[Schedule, list]]


def default_kernel(task: Task, target: Target) -> tuple[Schedule, list]:
    """The untuned schedule of a task: the baseline tuning improves on."""
    args, outs = task_compute(task)
    lanes = max(1, getattr(target.capabilities, "vector_bytes", 64) // 4)
    return default_schedule(task, outs, lanes), args + outs


@dataclass(frozen=True)
class ModelFiles:
    library: Path
    manifest: Path
    weights: Path


def build_model(graph: Graph, out: Path, target: Target | str = "llvm",
                schedule_for: ScheduleFor = default_kernel) -> ModelFiles:
    """Compile `graph` into `out` (a .so) with its manifest (.json) and weights (.weights) beside it."""
    target = Target.parse(target) if isinstance(target, str) else target
    graph = optimize(graph)
    groups = fuse(graph)
    taskset = extract_tasks(graph, groups)
    plan = plan_memory(graph, groups)
    renderer = renderer_for(target.kind)
    funcs, symbols = [], []
    for k, task in enumerate(taskset.tasks):
        sched, args = schedule_for(task, target)
        funcs.append(lower(sched, args, f"task{k}"))
        symbols.append(renderer.symbol(funcs[-1]))
    weights, offsets = _pack_weights(graph, groups)
    executor = _executor(graph, groups, taskset.group_tasks, funcs, renderer, offsets, plan.buffers, plan.arena_size,
                         len(weights))
    source = renderer.render_module(funcs, tail=executor)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(compile_c(source), out)
    files = ModelFiles(out, out.with_suffix(".json"), out.with_suffix(".weights"))
    files.weights.write_bytes(weights)
    files.manifest.write_text(json.dumps({
        "format": 1, "library": out.name, "weights": files.weights.name, "weights_bytes": len(weights),
        "target": str(target), "inputs": [_value_json(v) for v in graph.inputs],
        "outputs": [_value_json(v) for v in graph.outputs],
        "tasks": [{"key": t.key, "symbol": s, "weight": t.weight} for t, s in zip(taskset.tasks, symbols)],
    }, indent=1))
    out.with_suffix(".c").write_text(source)
    return files


def _value_json(v) -> dict:
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype}


def group_arguments(group: FusedGroup) -> list[str]:
    """Value names a group's kernel takes, in the order of `Task.input_values`, then its outputs."""
    inside = set(group.anchor.outputs)
    extras = []
    for node in group.epilogue:
        extras.extend(name for name in node.inputs if name not in inside)
        inside.update(node.outputs)
    return list(group.anchor.inputs) + extras + list(group.outputs)


def _pack_weights(graph: Graph, groups: list[FusedGroup]) -> tuple[bytes, dict[str, int]]:
    used = [n for n in dict.fromkeys(a for g in groups for a in group_arguments(g)) if n in graph.constants]
    used += [v.name for v in graph.outputs if v.name in graph.constants and v.name not in used]
    blob, offsets = bytearray(), {}
    for name in used:
        blob.extend(b"\0" * (-len(blob) % WEIGHT_ALIGN))
        offsets[name] = len(blob)
        blob.extend(np.ascontiguousarray(graph.constants[name], dtype=graph.values[name].dtype).tobytes())
    return bytes(blob), offsets


def _executor(graph: Graph, groups, group_tasks, funcs, renderer, weight_offsets: dict, buffers, arena_size: int,
              weights_bytes: int) -> str:
    inputs = {v.name: k for k, v in enumerate(graph.inputs)}
    outputs = {v.name: k for k, v in enumerate(graph.outputs)}

    def ptr(name: str) -> str:
        t = C_TYPES[graph.values[name].dtype]
        if name in inputs:  # before outputs: a graph input may also be an output
            return f"({t}*)inputs[{inputs[name]}]"
        if name in outputs:
            return f"({t}*)outputs[{outputs[name]}]"
        if name in weight_offsets:
            return f"({t}*)(model_weights + {weight_offsets[name]})"
        return f"({t}*)(model_arena + {buffers[name].offset})"

    calls = []
    for g, t in zip(groups, group_tasks):
        calls.append(f"  /* {g.anchor.op.value} {g.name} */")
        calls.append(f"  if ({renderer.symbol(funcs[t])}({', '.join(ptr(n) for n in group_arguments(g))}) != 0) return 1;")
    produced = {n for g in groups for n in g.outputs}
    for v in graph.outputs:
        if v.name not in produced:  # an output that is an input or a constant: copy it
            src = f"inputs[{inputs[v.name]}]" if v.name in inputs else f"model_weights + {weight_offsets[v.name]}"
            calls.append(f"  memcpy(outputs[{outputs[v.name]}], {src}, {v.nbytes});")
    protos = "\n".join(renderer.signature(f, [f"p{k}" for k in range(len(f.params))]) + ";" for f in funcs)
    return f"""/* ---- graph executor ---------------------------------------------------------- */
#include <stdio.h>
#include <string.h>
{protos}

static char* model_weights = NULL;
static char* model_arena = NULL;

/* Loads the weights file and allocates the arena: 0, or 1 (no memory), 2 (weights file unreadable or of the wrong size). */
int32_t autosched_model_init(const char* weights_path) {{
  model_weights = (char*)aligned_alloc({WEIGHT_ALIGN}, {max(WEIGHT_ALIGN, -(-weights_bytes // WEIGHT_ALIGN) * WEIGHT_ALIGN)});
  model_arena = (char*)aligned_alloc({WEIGHT_ALIGN}, {max(WEIGHT_ALIGN, -(-arena_size // WEIGHT_ALIGN) * WEIGHT_ALIGN)});
  if (model_weights == NULL || model_arena == NULL) return 1;
  FILE* f = fopen(weights_path, "rb");
  if (f == NULL) return 2;
  size_t got = fread(model_weights, 1, {weights_bytes}, f);
  int extra = fgetc(f);
  fclose(f);
  return (got == {weights_bytes} && extra == EOF) ? 0 : 2;
}}

void autosched_model_free(void) {{
  free(model_weights);
  free(model_arena);
  model_weights = model_arena = NULL;
}}

/* Runs the model: {len(groups)} kernels over {len(funcs)} distinct tasks. 0 on success. */
int32_t autosched_model_run(void** inputs, void** outputs) {{
{chr(10).join(calls)}
  return 0;
}}
"""
