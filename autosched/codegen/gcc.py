"""Compiling generated C with gcc into shared libraries, cached by a hash of source and flags.

Tuning compiles thousands of candidates and many are identical (different configs, same code);
the cache makes the second build free. Writes are atomic so parallel builders can share it.
The ISA comes from the target (``-march=haswell``, or ``-march=native`` for the host), and the
cache key holds the ISA extensions gcc actually enables under those flags: a cache directory
shared by an AVX-512 and an AVX2 host (a shared home, a container image) must never hand one
host's ``-march=native`` object to the other.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from autosched.codegen.errors import CompileError
from autosched.codegen.errors import format_diagnostics as compiler_diagnostics
from autosched.codegen.process import run_compiler
from autosched.target import CpuCapabilities, Target, TargetError, gcc_isa_flags
from autosched.tempdirs import temp_dir

#: every build's flags but the ISA's, which come from the target
BASE_FLAGS = ("-O3", "-fopenmp", "-std=gnu11", "-shared", "-fPIC")


def target_flags(target: Target | str) -> tuple[str, ...]:
    """The gcc command-line flags that build code for `target`."""
    target = Target.parse(target) if isinstance(target, str) else target
    if not isinstance(target.capabilities, CpuCapabilities):
        raise CompileError(f"gcc builds CPU code; target {target} is not a CPU target")
    return BASE_FLAGS + target.capabilities.cflags


def host_flags() -> tuple[str, ...]:
    """gcc flags for this machine: what a program that runs here (the CUDA emulation, whatever
    its cuda target) is built with."""
    return target_flags("llvm")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autosched" / "kernels"


@functools.cache
def compiler_version(cc: str = "gcc") -> str:
    try:
        return subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"the C compiler {cc!r} is not usable: {e}") from None


def cache_key(source: str, flags: Sequence[str], cc: str = "gcc") -> str:
    """What identifies a built object: source, flags, compiler and the ISA those flags select
    on this host (``-march=native`` alone says nothing about which ISA that was)."""
    try:
        isa = ",".join(sorted(gcc_isa_flags(tuple(f for f in flags if f.startswith("-m")), cc)))
    except TargetError as e:
        raise CompileError(str(e)) from None
    return hashlib.sha256("\0".join([source, *flags, cc, compiler_version(cc), isa]).encode()).hexdigest()[:32]


def compile_c(source: str, flags: Sequence[str], cache_dir: Path | None = None,
              timeout: float = 120.0, cc: str = "gcc") -> Path:
    """The path of a shared library built from `source` with `flags` (`target_flags` of the
    target), from the cache when already built."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = cache_key(source, flags, cc)
    out = cache / f"{key}.so"
    if out.exists():
        return out
    with temp_dir("cc") as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        obj = Path(tmp) / "kernel.so"
        try:
            proc = run_compiler([cc, *flags, str(src), "-o", str(obj), "-lm"], timeout, tmp)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{cc} did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise CompileError(format_diagnostics(proc.stderr, source, str(src)))
        staged = cache / f".{key}.{os.getpid()}.tmp"
        os.replace(obj, staged) if os.stat(obj).st_dev == os.stat(cache).st_dev else staged.write_bytes(obj.read_bytes())
        os.replace(staged, out)
    return out


def format_diagnostics(stderr: str, source: str, src_path: str) -> str:
    """gcc's errors, each followed by the offending line of the generated source."""
    return compiler_diagnostics("gcc", stderr, source, src_path, "kernel.c", r":(\d+):(\d+): (?:fatal )?error")


def optimization_report(source: str, flags: Sequence[str], cc: str = "gcc", timeout: float = 120.0) -> str:
    """gcc's own account of which loops it vectorized and unrolled, lines naming `kernel.c`.

    For a user checking that a schedule's annotations reached the machine code.
    """
    with temp_dir("cc") as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        try:
            proc = run_compiler([cc, *flags, "-fopt-info-vec-optimized", "-fopt-info-loop-optimized", str(src),
                                 "-o", str(Path(tmp) / "kernel.so"), "-lm"], timeout, tmp)
        except subprocess.TimeoutExpired:
            raise CompileError(f"{cc} did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise CompileError(format_diagnostics(proc.stderr, source, str(src)))
        return proc.stderr.replace(str(src), "kernel.c")
