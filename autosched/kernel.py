"""From a schedule to a callable kernel: lower, render for the target, compile, load."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from autosched.codegen import renderer_for
from autosched.codegen.gcc import compile_c
from autosched.lower import lower
from autosched.runtime import Kernel
from autosched.schedule import Schedule
from autosched.te import Tensor


def source(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: str = "llvm") -> str:
    """The generated code, for reading or dumping."""
    return renderer_for(target.split()[0]).render(lower(sched, args, name))


def build_kernel(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: str = "llvm",
                 cache_dir: Path | None = None) -> Kernel:
    func = lower(sched, args, name)
    renderer = renderer_for(target.split()[0])
    code = renderer.render(func)
    path = compile_c(code, cache_dir=cache_dir)
    return Kernel(path, renderer.symbol(func), func.params, code)
