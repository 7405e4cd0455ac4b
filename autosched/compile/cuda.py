"""The host side of a model built for target cuda: one shared library holding every task's kernel
(compiled by nvcc into its embedded fatbin), a graph executor launching them, and the CUDA
runtime, linked statically.

It exports the C executor's functions, so `autosched.runtime.Model` loads and runs it like a CPU
build: `autosched_model_init` uploads the weights and allocates the device arena and one device
buffer per model input and output; `autosched_model_run` copies the inputs in, launches the
kernels in order with each one's launch geometry, and copies the outputs back;
`autosched_model_profile` does the same with an event before each launch, so each kernel call's
time in the model can be read off the GPU's clock (what a model check keeps). Building needs
nvcc only; running needs a GPU and its driver. A CUDA error is returned as status 3, its text
by `autosched_last_error`.
"""
from __future__ import annotations

from pathlib import Path

from autosched.codegen.gpu import LaunchGeometry, check_limits, plan_kernel
from autosched.codegen.nvcc import compile_cuda
from autosched.compile.weights import WEIGHT_ALIGN, Weights, aligned_size, arg_pointer
from autosched.graph.ir import Graph
from autosched.lower import PrimFunc
from autosched.target import Target

DEVICE_BASES = {"inputs": "device_inputs", "outputs": "device_outputs", "weights": "device_weights",
                "arena": "device_arena"}
STATIC_SHARED_LIMIT = 48 * 1024  # above it a kernel must opt in to its dynamic shared memory


def cuda_executor(graph: Graph, calls: list, geometries: dict[str, LaunchGeometry], weights, buffers,
                  arena_size: int) -> str:
    """CUDA C++ for the executor of a model whose kernels precede it in the same source."""
    ptr = arg_pointer(graph, weights, buffers, DEVICE_BASES)
    inputs = {v.name: k for k, v in enumerate(graph.inputs)}
    outputs = {v.name: k for k, v in enumerate(graph.outputs)}
    produced = {n for group, _, _ in calls for n in group.outputs}
    launches = []
    for k, (group, symbol, args) in enumerate(calls):
        g = geometries[symbol]
        launches += [f"  /* {group.anchor.op.value} {group.name} */",
                     f"  if (timed) CHECK(cudaEventRecord(call_events[{k}]));",
                     f"  {symbol}<<<dim3({', '.join(map(str, g.grid))}), dim3({', '.join(map(str, g.block))}), "
                     f"{g.shared_bytes}>>>({', '.join(ptr(a) for a in args)});",
                     "  CHECK(cudaGetLastError());"]
    copy_in = [f"  CHECK(cudaMemcpy(device_inputs[{k}], inputs[{k}], {v.nbytes}, cudaMemcpyHostToDevice));"
               for k, v in enumerate(graph.inputs)]
    copy_out = []
    for v in graph.outputs:
        k = outputs[v.name]
        if v.name in produced:
            copy_out.append(f"  CHECK(cudaMemcpy(outputs[{k}], device_outputs[{k}], {v.nbytes}, cudaMemcpyDeviceToHost));")
        else:  # an output that is an input or a constant: copy it on the host
            src = f"inputs[{inputs[v.name]}]" if v.name in inputs else f"model_weights + {weights.offsets[v.name]}"
            copy_out.append(f"  memcpy(outputs[{k}], {src}, {v.nbytes});")
    opt_in = [f"  CHECK(cudaFuncSetAttribute({s}, cudaFuncAttributeMaxDynamicSharedMemorySize, {g.shared_bytes}));"
              for s, g in geometries.items() if g.shared_bytes > STATIC_SHARED_LIMIT]
    allocs = [f"  CHECK(cudaMalloc(&device_inputs[{k}], {max(1, v.nbytes)}));" for k, v in enumerate(graph.inputs)]
    allocs += [f"  CHECK(cudaMalloc(&device_outputs[{k}], {max(1, v.nbytes)}));" for k, v in enumerate(graph.outputs)]
    n_weights = len(weights.blob)
    nl = "\n"
    return f"""/* ---- graph executor (host) ---------------------------------------------------- */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda_runtime.h>

static char* model_weights = NULL;
static char* device_weights = NULL;
static char* device_arena = NULL;
static void* device_inputs[{max(1, len(graph.inputs))}];
static void* device_outputs[{max(1, len(graph.outputs))}];
static cudaError_t model_error = cudaSuccess;
static cudaEvent_t call_events[{len(calls) + 1}];  /* recorded before each launch and after the last */
#define CHECK(call) do {{ cudaError_t e_ = (call); if (e_ != cudaSuccess) {{ model_error = e_; return 3; }} }} while (0)

extern "C" const char* autosched_last_error(void) {{ return cudaGetErrorString(model_error); }}
extern "C" void autosched_set_num_threads(int32_t n) {{ (void)n; }}

/* Loads the weights onto the GPU: 0, or 1 (no host memory), 2 (weights file unreadable or of the wrong size),
   3 (a CUDA error: no device, no device memory; see autosched_last_error). */
extern "C" int32_t autosched_model_init(const char* weights_path) {{
  model_weights = (char*)aligned_alloc({WEIGHT_ALIGN}, {aligned_size(n_weights)});
  if (model_weights == NULL) return 1;
  FILE* f = fopen(weights_path, "rb");
  if (f == NULL) return 2;
  size_t got = fread(model_weights, 1, {n_weights}, f);
  int extra = fgetc(f);
  fclose(f);
  if (got != {n_weights} || extra != EOF) return 2;
  CHECK(cudaMalloc((void**)&device_weights, {max(1, n_weights)}));
  CHECK(cudaMemcpy(device_weights, model_weights, {n_weights}, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc((void**)&device_arena, {max(1, arena_size)}));
{nl.join(allocs)}
{nl.join(opt_in)}
  for (int k = 0; k <= {len(calls)}; ++k) CHECK(cudaEventCreate(&call_events[k]));
  return 0;
}}

extern "C" void autosched_model_free(void) {{
  cudaFree(device_weights);
  cudaFree(device_arena);
  for (int k = 0; k < {len(graph.inputs)}; ++k) cudaFree(device_inputs[k]);
  for (int k = 0; k < {len(graph.outputs)}; ++k) cudaFree(device_outputs[k]);
  for (int k = 0; k <= {len(calls)}; ++k) cudaEventDestroy(call_events[k]);
  free(model_weights);
  model_weights = device_weights = device_arena = NULL;
}}

/* Runs the model: {len(calls)} kernel launches, each after an event when `timed`. 0 on success, 3 on a
   CUDA error. */
static int32_t run_model(void** inputs, void** outputs, int timed) {{
{nl.join(copy_in)}
{nl.join(launches)}
  if (timed) CHECK(cudaEventRecord(call_events[{len(calls)}]));
{nl.join(copy_out)}
  CHECK(cudaDeviceSynchronize());
  return 0;
}}

extern "C" int32_t autosched_model_run(void** inputs, void** outputs) {{ return run_model(inputs, outputs, 0); }}

/* Runs the model once, each kernel call's seconds into seconds[k]: the GPU's time from the event
   before its launch to the event before the next (after the last, for the last), so a call's
   share includes any wait for the host to launch it. 0, or 3 on a CUDA error. */
extern "C" int32_t autosched_model_profile(void** inputs, void** outputs, double* seconds) {{
  int32_t status = run_model(inputs, outputs, 1);
  if (status != 0) return status;
  for (int k = 0; k < {len(calls)}; ++k) {{
    float ms = 0.0f;
    CHECK(cudaEventElapsedTime(&ms, call_events[k], call_events[k + 1]));
    seconds[k] = 1e-3 * ms;
  }}
  return 0;
}}
"""


def cuda_library(graph: Graph, calls: list, funcs: list[PrimFunc], renderer, weights: Weights, memory,
                 target: Target) -> tuple[str, Path]:
    """Source and nvcc-built library of a cuda model: kernels, host executor, CUDA runtime."""
    geometries = {}
    for f in funcs:
        geometries[renderer.symbol(f)] = plan_kernel(f).geometry
        check_limits(renderer.symbol(f), geometries[renderer.symbol(f)], target.gpu_capabilities)
    executor = cuda_executor(graph, calls, geometries, weights, memory.views, memory.arena_size)
    source = renderer.render_module(funcs, tail=executor)
    return source, compile_cuda(source, target.gpu_capabilities.arch, output="so").path


__all__ = ["cuda_executor", "cuda_library"]
