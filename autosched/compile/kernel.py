"""From a schedule to a callable kernel: lower, render for the target, compile, load."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from autosched.codegen import renderer_for
from autosched.codegen.gcc import compile_c, target_flags
from autosched.lower import lower
from autosched.runtime import Kernel
from autosched.schedule import Schedule
from autosched.target import Target
from autosched.te import Tensor


def source(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: Target | str = "llvm") -> str:
    """The generated code, for reading or dumping."""
    target = Target.parse(target) if isinstance(target, str) else target
    return renderer_for(target.kind).render(lower(sched, args, name))


def build_kernel(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: Target | str = "llvm",
                 cache_dir: Path | None = None) -> Kernel:
    """The schedule compiled for `target` (the host by default) and loaded."""
    target = Target.parse(target) if isinstance(target, str) else target
    func = lower(sched, args, name)
    renderer = renderer_for(target.kind)
    code = renderer.render(func)
    path = compile_c(code, target_flags(target), cache_dir=cache_dir)
    return Kernel(path, renderer.symbol(func), func.params, code)
