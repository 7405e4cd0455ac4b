"""Measuring CUDA candidates without a GPU: built as the CPU emulation, run by the local runner.

Each candidate is checked against the target architecture's limits exactly as the nvcc builder
checks it (so a RESOURCE_LIMIT here is one there, registers included where nvcc is installed),
then rendered as CUDA-semantics C and compiled with gcc; the local runner checks its output
against the task's reference. How long the emulation takes says nothing about a GPU, so it is
never reported: the cost of a candidate that passes is the static model's estimate
(`autosched.measure.static_model`, from nvcc's cubin and its SASS where nvcc is installed),
written in the manifest, which the worker reports instead of timing the emulation. Records of
these costs are stored under the emulated target (`Target.emulated`), apart from GPU timings.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from autosched.codegen import CompileError
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.cuda_emulate import EmulationRenderer
from autosched.codegen.gcc import host_flags
from autosched.codegen.gpu import LaunchGeometry, check_limits
from autosched.codegen.nvcc import compile_cuda
from autosched.codegen.sass import SassError, kernel_sass, sass_available
from autosched.lower.ir import PrimFunc
from autosched.measure.gpu_build import INSTANTIATION_ERRORS, build_failure, candidate_name, lower_for_gpu
from autosched.measure.local import Instantiate, LocalBuilder, RunnerOptions, compile_candidate
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput
from autosched.measure.static_model import StaticEstimate, estimate

#: how the CPU worker runs emulated kernels: once (their times rank nothing), with time to spare
#: (an emulated GPU grid runs its threads one after another)
EMULATION_RUNNER = RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0)


def static_estimate(inp: MeasureInput, func: PrimFunc, geometry: LaunchGeometry, cache_dir: str | None,
                    compile_timeout: float) -> StaticEstimate:
    """The static model's estimate of the candidate's kernel: from nvcc's cubin (registers,
    spills, SASS) where nvcc is installed, else from the loop nest alone. LimitError where
    ptxas's registers cannot launch; CompileError where nvcc rejects the kernel."""
    caps = inp.target.gpu_capabilities
    if shutil.which("nvcc") is None:
        return estimate(func, geometry, caps)
    renderer = CudaRenderer()
    built = compile_cuda(renderer.render(func), caps.arch, cache_dir=Path(cache_dir) if cache_dir else None,
                         timeout=compile_timeout)
    usage = built.usage[renderer.symbol(func)]
    check_limits(candidate_name(inp), geometry, caps, registers=usage.registers)
    try:
        sass = kernel_sass(built.path, renderer.symbol(func)) if sass_available() else None
    except SassError:
        sass = None
    return estimate(func, geometry, caps, usage, sass)


def _build_emulated(inp: MeasureInput, instantiate: Instantiate, cache_dir: str | None,
                    compile_timeout: float) -> BuildResult:
    start = time.perf_counter()
    renderer = EmulationRenderer()
    try:
        func, geometry = lower_for_gpu(inp, instantiate)
        code = renderer.render(func)
        model = static_estimate(inp, func, geometry, cache_dir, compile_timeout)
    except INSTANTIATION_ERRORS as e:
        return build_failure(e, start)
    except CompileError as e:  # nvcc refused what gcc might take: it would never run on a GPU
        kind = ErrorKind.COMPILE_TIMEOUT if "did not finish" in str(e) else ErrorKind.COMPILE_ERROR
        return BuildResult(None, kind, str(e), time.perf_counter() - start)
    return compile_candidate(code, func, renderer.symbol(func), host_flags(), cache_dir, compile_timeout, start,
                             static_estimate=model.to_json())


class EmulationBuilder(LocalBuilder):
    """Builds CUDA candidates as their CPU emulation, for `LocalRunner` to check."""

    build_one = staticmethod(_build_emulated)


__all__ = ["EMULATION_RUNNER", "EmulationBuilder"]
