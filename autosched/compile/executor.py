"""The host side of a model built for a CPU (or the CUDA emulation): every task's kernel and a
graph executor in C, one translation unit compiled by gcc.

`autosched_model_run` calls the kernels in order with pointers into the caller's inputs and
outputs, the weights (loaded once by `autosched_model_init` from the file beside the library)
and one arena whose offsets the memory planner chose. `autosched_model_profile` runs the same
calls and writes the seconds each took: a kernel's time in the model, after the kernels before
it, which is what a model's latency is made of and what an isolated timing only estimates.
"""
from __future__ import annotations

from pathlib import Path

from autosched.codegen.gcc import compile_c, target_flags
from autosched.compile.weights import Weights, arg_pointer
from autosched.graph.ir import Graph
from autosched.lower import PrimFunc
from autosched.target import Target


def c_executor(graph: Graph, calls: list, funcs: list[PrimFunc], renderer, weights: Weights, buffers,
              arena_size: int) -> str:
    """C for the executor of a model whose kernels precede it in the same translation unit."""
    inputs = {v.name: k for k, v in enumerate(graph.inputs)}
    outputs = {v.name: k for k, v in enumerate(graph.outputs)}
    ptr = arg_pointer(graph, weights, buffers)
    lines, timed = [], []
    for k, (group, symbol, args) in enumerate(calls):
        call = f"  if ({symbol}({', '.join(ptr(a) for a in args)}) != 0) return 1;"
        lines += [f"  /* {group.anchor.op.value} {group.name} */", call]
        timed += [call, f"  t1 = model_now(); seconds[{k}] = t1 - t0; t0 = t1;"]
    produced = {n for group, _, _ in calls for n in group.outputs}
    copies = []
    for v in graph.outputs:
        if v.name not in produced:  # an output that is an input or a constant: copy it
            src = f"inputs[{inputs[v.name]}]" if v.name in inputs else f"model_weights + {weights.offsets[v.name]}"
            copies.append(f"  memcpy(outputs[{outputs[v.name]}], {src}, {v.nbytes});")
    protos = "\n".join(renderer.signature(f, [f"p{k}" for k in range(len(f.params))]) + ";" for f in funcs)
    n_weights = len(weights.blob)
    return f"""/* ---- graph executor ---------------------------------------------------------- */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
{protos}

static char* model_weights = NULL;
static char* model_arena = NULL;

/* Weights and arena each in a mapping of their own on 2 MiB boundaries, asked for as transparent
   huge pages before they are touched. Left to malloc, where they land changes from one load to
   the next, and with it how many huge pages a kernel with THP "always" gives them (with THP
   "madvise", none: 0 of ResNet-18's 62 MB against all of it here); one suspect of the same build
   running at two speeds from one load to the next (issue 18). aligned_alloc was not enough: the
   runtime keeps freed blocks up to 32 MiB in the heap (`keep_freed_memory`), and a block reused
   there is already backed by small pages, which madvise does not change (a MobileNetV2 loaded
   twice in one process: 0 and 12 MB of huge pages). And an untouched arena page-faulted during
   the first run. */
static size_t model_mapped(size_t bytes) {{
  size_t huge = (size_t)2 << 20;
  return bytes == 0 ? huge : (bytes + huge - 1) / huge * huge;
}}

static char* model_alloc(size_t bytes) {{
  size_t huge = (size_t)2 << 20, size = model_mapped(bytes);
  char* raw = (char*)mmap(NULL, size + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char* p = (char*)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
  if (p > raw) munmap(raw, (size_t)(p - raw));
  if (raw + huge > p) munmap(p + size, (size_t)(raw + huge - p));
#ifdef MADV_HUGEPAGE
  madvise(p, size, MADV_HUGEPAGE);
#endif
  memset(p, 0, size);
  return p;
}}

/* Loads the weights file and allocates the arena: 0, or 1 (no memory), 2 (weights file unreadable or of the wrong size). */
int32_t autosched_model_init(const char* weights_path) {{
  model_weights = model_alloc({n_weights});
  model_arena = model_alloc({arena_size});
  if (model_weights == NULL || model_arena == NULL) return 1;
  FILE* f = fopen(weights_path, "rb");
  if (f == NULL) return 2;
  size_t got = fread(model_weights, 1, {n_weights}, f);
  int extra = fgetc(f);
  fclose(f);
  return (got == {n_weights} && extra == EOF) ? 0 : 2;
}}

void autosched_model_free(void) {{
  if (model_weights != NULL) munmap(model_weights, model_mapped({n_weights}));
  if (model_arena != NULL) munmap(model_arena, model_mapped({arena_size}));
  model_weights = model_arena = NULL;
}}

/* Runs the model: {len(calls)} kernel calls over {len(funcs)} distinct kernels. 0 on success. */
int32_t autosched_model_run(void** inputs, void** outputs) {{
{chr(10).join(lines + copies)}
  return 0;
}}

static double model_now(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}

/* Runs the model as autosched_model_run does, writing each kernel call's seconds to seconds[0..{len(calls) - 1}]. */
int32_t autosched_model_profile(void** inputs, void** outputs, double* seconds) {{
  double t0 = model_now(), t1;
  (void)t1;
{chr(10).join(timed + copies)}
  (void)seconds;
  return 0;
}}
"""


def c_library(graph: Graph, calls: list, funcs: list[PrimFunc], renderer, weights: Weights, memory,
              target: Target) -> tuple[str, Path]:
    """Source and gcc-built library of a model whose binary runs on `target` (a CPU)."""
    executor = c_executor(graph, calls, funcs, renderer, weights, memory.views, memory.arena_size)
    source = renderer.render_module(funcs, tail=executor)
    return source, compile_c(source, target_flags(target))


__all__ = ["c_executor", "c_library"]
