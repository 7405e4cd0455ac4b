"""From a schedule to a callable kernel: lower, render for the target, compile, load."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autosched.backend import backend_for
from autosched.codegen.gcc import compile_c
from autosched.lower import lower
from autosched.runtime import Kernel
from autosched.schedule import Schedule
from autosched.target import Target
from autosched.te import Tensor


def source(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: Target | str = "llvm") -> str:
    """The generated code, for reading or dumping."""
    return backend_for(target).renderer().render(lower(sched, args, name))


def build_kernel(sched: Schedule, args: Sequence[Tensor], name: str = "kernel", target: Target | str = "llvm",
                 cache_dir: Path | None = None) -> Kernel:
    """The schedule compiled for `target` (the host by default) and loaded: a CPU kernel, whose
    back end compiles with gcc (a cuda kernel runs here through `compile.emulation`)."""
    target = Target.parse(target) if isinstance(target, str) else target
    backend = backend_for(target)
    func = lower(sched, args, name)
    renderer = backend.renderer()
    code = renderer.render(func)
    path = compile_c(code, backend.flags(target), cache_dir=cache_dir)
    return Kernel(path, renderer.symbol(func), func.params, code)
