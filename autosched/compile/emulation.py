"""Running CUDA schedules on this CPU: the CUDA emulation back end's C, built for the host.

The generated code is a GPU kernel, so its target is cuda; what gcc builds is the emulation of
it, so the compiler flags are the host's (the back end's binary target).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autosched.backend import CUDA_EMULATION
from autosched.codegen.gcc import compile_c, host_flags
from autosched.lower import lower
from autosched.lower.ir import PrimFunc
from autosched.runtime import Kernel
from autosched.schedule import Schedule
from autosched.te import Tensor


def emulated_kernel(func: PrimFunc, cache_dir: Path | None = None) -> Kernel:
    """A lowered GPU kernel compiled as its CPU emulation and loaded: same arguments as on a GPU."""
    renderer = CUDA_EMULATION.renderer()
    code = renderer.render(func)
    return Kernel(compile_c(code, host_flags(), cache_dir=cache_dir), renderer.symbol(func), func.params, code)


def build_emulated_kernel(sched: Schedule, args: Sequence[Tensor], name: str = "kernel",
                          cache_dir: Path | None = None) -> Kernel:
    """`emulated_kernel` of a GPU schedule."""
    return emulated_kernel(lower(sched, args, name), cache_dir)


__all__ = ["build_emulated_kernel", "emulated_kernel"]
