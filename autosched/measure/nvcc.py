"""Building CUDA candidates with nvcc: no GPU needed, so builds run anywhere, in parallel.

Each candidate is lowered, rendered as CUDA, checked against the target architecture's limits
(threads, shared memory), compiled to a cubin, then checked again with ptxas's register count:
a candidate that could never launch is a RESOURCE_LIMIT result before any device time, and the
cost model learns from it like from any other failure. The manifest beside the cubin carries
what a GPU runner needs: the kernel's symbol, parameters, launch geometry and resource usage.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from autosched.codegen import CompileError
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.gpu import LaunchGeometry, LimitError, check_limits, occupancy
from autosched.codegen.nvcc import ResourceUsage, compile_cuda
from autosched.codegen.sass import SassProfile, kernel_sass
from autosched.measure.gpu_build import INSTANTIATION_ERRORS, build_failure, candidate_name, lower_for_gpu
from autosched.measure.local import Instantiate, LocalBuilder, write_manifest
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput
from autosched.target import GpuCapabilities


def _build_cubin(inp: MeasureInput, instantiate: Instantiate, cache_dir: str | None,
                 compile_timeout: float) -> BuildResult:
    start = time.perf_counter()
    renderer = CudaRenderer()
    try:
        func, geometry = lower_for_gpu(inp, instantiate)
        code = renderer.render(func)
    except INSTANTIATION_ERRORS as e:
        return build_failure(e, start)
    caps = inp.target.gpu_capabilities
    try:
        built = compile_cuda(code, caps.arch, cache_dir=Path(cache_dir) if cache_dir else None, timeout=compile_timeout)
    except CompileError as e:
        kind = ErrorKind.COMPILE_TIMEOUT if "did not finish" in str(e) else ErrorKind.COMPILE_ERROR
        return BuildResult(None, kind, str(e), time.perf_counter() - start)
    symbol = renderer.symbol(func)
    usage = built.usage[symbol]
    try:
        check_limits(candidate_name(inp), geometry, caps, registers=usage.registers)
    except LimitError as e:
        return build_failure(e, start)
    manifest = built.path.with_suffix(".json")
    write_manifest(manifest, func, symbol, cubin=str(built.path), arch=caps.arch, geometry=geometry.to_json(),
                   usage=asdict(usage))
    return BuildResult(str(manifest), ErrorKind.NO_ERROR, "", time.perf_counter() - start)


@dataclass(frozen=True)
class KernelInspection:
    """What a built candidate's machine code says, without running it: ptxas's resource usage,
    the occupancy it allows on the architecture, and the SASS instruction mix."""

    usage: ResourceUsage
    occupancy: float
    sass: SassProfile

    def summary(self) -> dict:
        return {"registers": self.usage.registers, "spill_bytes": self.usage.spill_stores + self.usage.spill_loads,
                "occupancy": self.occupancy, **self.sass.summary()}


def inspect_build(manifest: str, caps: GpuCapabilities) -> KernelInspection:
    """Read a candidate NvccBuilder built (its manifest) back: usage, occupancy on `caps`, SASS."""
    m = json.loads(Path(manifest).read_text())
    g = m["geometry"]
    geometry = LaunchGeometry(tuple(g["grid"]), tuple(g["block"]), g["shared_bytes"])
    usage = ResourceUsage(**m["usage"])
    return KernelInspection(usage, occupancy(geometry, caps, usage.registers, usage.static_shared_bytes),
                            kernel_sass(m["cubin"], m["symbol"]))


class NvccBuilder(LocalBuilder):
    """Compiles CUDA candidates with nvcc in `n_parallel` processes, each within `timeout` seconds."""

    build_one = staticmethod(_build_cubin)


__all__ = ["KernelInspection", "NvccBuilder", "inspect_build"]
