"""Building CUDA candidates with nvcc: no GPU needed, so builds run anywhere, in parallel.

Each candidate is lowered, rendered as CUDA, checked against the target architecture's limits
(threads, shared memory), compiled to a cubin, then checked again with ptxas's register count:
a candidate that could never launch is a RESOURCE_LIMIT result before any device time, and the
cost model learns from it like from any other failure. The manifest beside the cubin carries
what a GPU runner needs: the kernel's symbol, parameters, launch geometry and resource usage.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from autosched.codegen import CompileError
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.gpu import LimitError, check_limits, plan_kernel
from autosched.codegen.nvcc import compile_cuda
from autosched.errors import AutoschedError
from autosched.lower import lower
from autosched.measure.local import Instantiate, LocalBuilder
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput
from autosched.target import GpuCapabilities


def _build_cubin(inp: MeasureInput, instantiate: Instantiate, cache_dir: str | None,
                 compile_timeout: float) -> BuildResult:
    start = time.perf_counter()

    def failed(kind: ErrorKind, msg: str) -> BuildResult:
        return BuildResult(None, kind, msg, time.perf_counter() - start)

    caps = inp.target.capabilities
    if not isinstance(caps, GpuCapabilities):
        return failed(ErrorKind.INSTANTIATION_ERROR, f"NvccBuilder builds for cuda targets, not {inp.target}")
    try:
        sched, args = instantiate(inp)
        func = lower(sched, args, "candidate")
        renderer = CudaRenderer()
        code = renderer.render(func)
        geometry = plan_kernel(func).geometry
        check_limits(f"{inp.task.key} {inp.config}", geometry, caps)
    except LimitError as e:
        return failed(ErrorKind.RESOURCE_LIMIT, str(e))
    except (AutoschedError, ValueError, KeyError, IndexError, TypeError) as e:
        return failed(ErrorKind.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}")
    try:
        built = compile_cuda(code, caps.arch, cache_dir=Path(cache_dir) if cache_dir else None, timeout=compile_timeout)
    except CompileError as e:
        return failed(ErrorKind.COMPILE_TIMEOUT if "did not finish" in str(e) else ErrorKind.COMPILE_ERROR, str(e))
    symbol = renderer.symbol(func)
    usage = built.usage[symbol]
    try:
        check_limits(f"{inp.task.key} {inp.config}", geometry, caps, registers=usage.registers)
    except LimitError as e:
        return failed(ErrorKind.RESOURCE_LIMIT, str(e))
    manifest = built.path.with_suffix(".json")
    if not manifest.exists():
        params = [{"name": b.name, "dtype": b.dtype, "shape": list(b.shape)} for b in func.params]
        tmp = manifest.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"cubin": str(built.path), "symbol": symbol, "params": params, "arch": caps.arch,
                                   "geometry": geometry.to_json(), "usage": asdict(usage)}))
        os.replace(tmp, manifest)
    return BuildResult(str(manifest), ErrorKind.NO_ERROR, "", time.perf_counter() - start)


class NvccBuilder(LocalBuilder):
    """Compiles CUDA candidates with nvcc in `n_parallel` processes, each within `timeout` seconds."""

    build_one = staticmethod(_build_cubin)


__all__ = ["NvccBuilder"]
