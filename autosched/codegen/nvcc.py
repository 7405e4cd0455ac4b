"""Compiling generated CUDA with nvcc into cubins, cached like gcc builds, with ptxas's resource usage.

nvcc needs no GPU: `nvcc -cubin -arch=sm_XX --resource-usage` reports each kernel's registers,
spills and static shared memory, which decide whether a candidate can launch at all (registers ×
threads per block against the multiprocessor's register file) before any device time is spent.
The usage is cached beside the cubin, so a cache hit answers the same question for free.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from autosched.codegen.errors import CompileError
from autosched.codegen.errors import format_diagnostics as compiler_diagnostics
from autosched.codegen.gcc import default_cache_dir
from autosched.codegen.process import run_compiler
from autosched.tempdirs import temp_dir

DEFAULT_FLAGS = ("-O3", "--use_fast_math")


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one kernel."""

    registers: int
    spill_stores: int  # bytes
    spill_loads: int   # bytes
    stack_bytes: int
    static_shared_bytes: int


@dataclass(frozen=True)
class CubinBuild:
    """What nvcc built (a cubin or a shared library) and ptxas's account of each kernel."""

    path: Path
    usage: dict  # kernel name -> ResourceUsage


@functools.cache
def nvcc_version(nvcc: str = "nvcc") -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise CompileError(f"the CUDA compiler {nvcc!r} is not usable ({e}); install the CUDA toolkit "
                           "(nvcc) to build for target cuda") from None
    m = re.search(r"release [0-9.]+, V([0-9.]+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1]


#: what nvcc makes: a cubin of the kernels (tuning), or a shared library of kernels and host code
#: (a whole model's executor, CUDA runtime linked in statically)
OUTPUTS = {"cubin": ("-cubin",), "so": ("-shared", "-Xcompiler", "-fPIC")}


def compile_cuda(source: str, arch: str, flags: Sequence[str] = DEFAULT_FLAGS, cache_dir: Path | None = None,
                 timeout: float = 120.0, nvcc: str = "nvcc", output: str = "cubin") -> CubinBuild:
    """A cubin (or with `output="so"` a shared library) of `source` for `arch`, from the cache when
    already built, and its kernels' resource usage."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\0".join([source, arch, *flags, *OUTPUTS[output], nvcc, nvcc_version(nvcc)]).encode())
    key = digest.hexdigest()[:32]
    built, usage_file = cache / f"{key}.{output}", cache / f"{key}.usage.json"
    if built.exists() and usage_file.exists():
        usage = {k: ResourceUsage(**v) for k, v in json.loads(usage_file.read_text()).items()}
        return CubinBuild(built, usage)
    with temp_dir("nvcc") as tmp:
        src = Path(tmp) / "kernel.cu"
        src.write_text(source)
        out = Path(tmp) / f"kernel.{output}"
        try:
            proc = run_compiler([nvcc, *OUTPUTS[output], f"-arch={arch}", "--resource-usage", *flags, str(src),
                                 "-o", str(out)], timeout, tmp)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise CompileError(format_diagnostics(proc.stderr + proc.stdout, source, str(src)))
        usage = parse_resource_usage(proc.stdout + proc.stderr)
        for path, data in ((usage_file, json.dumps({k: asdict(v) for k, v in usage.items()}).encode()),
                           (built, out.read_bytes())):
            staged = cache / f".{path.name}.{os.getpid()}.tmp"
            staged.write_bytes(data)
            os.replace(staged, path)
    return CubinBuild(built, usage)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_NUM = {"registers": r"Used (\d+) registers", "spill_stores": r"(\d+) bytes spill stores",
        "spill_loads": r"(\d+) bytes spill loads", "stack_bytes": r"(\d+) bytes stack frame",
        "static_shared_bytes": r"(\d+) bytes smem"}


def parse_resource_usage(text: str) -> dict[str, ResourceUsage]:
    """kernel name -> usage, from ptxas's `--resource-usage` lines (absent figures are 0)."""
    blocks = _ENTRY.split(text)
    out = {}
    for name, body in zip(blocks[1::2], blocks[2::2]):
        found = {field: re.search(pattern, body) for field, pattern in _NUM.items()}
        out[name] = ResourceUsage(**{field: int(m.group(1)) if m else 0 for field, m in found.items()})
    return out


def format_diagnostics(stderr: str, source: str, src_path: str) -> str:
    """nvcc's errors, each followed by the offending line of the generated source."""
    return compiler_diagnostics("nvcc", stderr, source, src_path, "kernel.cu", r"\((\d+)\): error")


__all__ = ["CubinBuild", "ResourceUsage", "compile_cuda", "nvcc_version", "parse_resource_usage"]
