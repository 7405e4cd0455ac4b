"""Measuring CUDA candidates without a GPU: built as the CPU emulation, run by the local runner.

Each candidate is checked against the target architecture's limits exactly as the nvcc builder
checks it (so a RESOURCE_LIMIT here is one there), then rendered as CUDA-semantics C and
compiled with gcc; the local runner checks its output against the task's reference. Its
"costs" time the emulation, not the GPU: use them to prove candidates correct, not to rank them.
"""
from __future__ import annotations

import time

from autosched.codegen.cuda_emulate import EmulationRenderer
from autosched.compile.emulation import host_flags
from autosched.measure.gpu_build import INSTANTIATION_ERRORS, build_failure, lower_for_gpu
from autosched.measure.local import Instantiate, LocalBuilder, RunnerOptions, compile_candidate
from autosched.measure.record import BuildResult, MeasureInput

#: how the CPU worker runs emulated kernels: once (their times rank nothing), with time to spare
#: (an emulated GPU grid runs its threads one after another)
EMULATION_RUNNER = RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0)


def _build_emulated(inp: MeasureInput, instantiate: Instantiate, cache_dir: str | None,
                    compile_timeout: float) -> BuildResult:
    start = time.perf_counter()
    renderer = EmulationRenderer()
    try:
        func, _ = lower_for_gpu(inp, instantiate)
        code = renderer.render(func)
    except INSTANTIATION_ERRORS as e:
        return build_failure(e, start)
    return compile_candidate(code, func, renderer.symbol(func), host_flags(), cache_dir, compile_timeout, start)


class EmulationBuilder(LocalBuilder):
    """Builds CUDA candidates as their CPU emulation, for `LocalRunner` to check."""

    build_one = staticmethod(_build_emulated)


__all__ = ["EMULATION_RUNNER", "EmulationBuilder"]
