"""The part of building a GPU candidate every GPU builder shares (nvcc, the CPU emulation):
instantiate, lower and check the launch against the target's limits before compiling."""
from __future__ import annotations

import time

from autosched.codegen.errors import CodegenError
from autosched.codegen.gpu import LaunchGeometry, LimitError, check_limits, plan_kernel
from autosched.errors import AutoschedError
from autosched.lower import lower
from autosched.lower.ir import PrimFunc
from autosched.measure.local import Instantiate
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput
from autosched.target import GpuCapabilities

#: what instantiating a bad config may raise: each is one failed trial, never a crash
INSTANTIATION_ERRORS = (AutoschedError, ValueError, KeyError, IndexError, TypeError)


def lower_for_gpu(inp: MeasureInput, instantiate: Instantiate) -> tuple[PrimFunc, LaunchGeometry]:
    """The candidate's kernel and launch geometry; LimitError when it cannot launch on the target."""
    caps = inp.target.capabilities
    if not isinstance(caps, GpuCapabilities):
        raise AutoschedError(f"a GPU builder builds for cuda targets, not {inp.target}")
    sched, args = instantiate(inp)
    func = lower(sched, args, "candidate")
    where = candidate_name(inp)
    try:
        geometry = plan_kernel(func).geometry
    except CodegenError as e:  # say which task and config, not the kernel's internal name
        raise type(e)(f"{where}: {str(e).removeprefix(func.name + ': ')}") from None
    check_limits(where, geometry, caps)
    return func, geometry


def candidate_name(inp: MeasureInput) -> str:
    """How errors name a candidate: its op, template and config index."""
    return f"{inp.task.op} config {inp.config.index} of {inp.config.space.template}"


def build_failure(e: Exception, start: float) -> BuildResult:
    """A limit is RESOURCE_LIMIT (the cost model learns the device's bounds from it); anything
    else the config caused is INSTANTIATION_ERROR."""
    if isinstance(e, LimitError):
        return BuildResult(None, ErrorKind.RESOURCE_LIMIT, str(e), time.perf_counter() - start)
    return BuildResult(None, ErrorKind.INSTANTIATION_ERROR, f"{type(e).__name__}: {e}", time.perf_counter() - start)
