"""Reading the machine code (SASS) nvcc made for a kernel, without a GPU.

The CUDA source says what a kernel asks for; the SASS says what it got: whether the tensor-core
instructions (HMMA), asynchronous copies (LDGSTS), 128-bit loads (LDG.E.128, LDS.128) and warp
shuffles (SHFL) a template meant to emit are there, and whether registers spilled to local memory
(LDL/STL). `cuobjdump -sass` prints it from a cubin (it calls `nvdisasm`); both come with the CUDA
toolkit or as the `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm` wheels, whose binaries are
found in the wheel's package directory when they are not on PATH.

Counts are static (each instruction once, however often a loop runs it): enough to prove an
instruction kind is present or absent, and to compare the mix of two configs of one template.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from autosched.errors import AutoschedError

#: where the NVIDIA wheels put the binaries, relative to the `nvidia` namespace package
#: (CUDA 13 wheels share `cu13/bin`; CUDA 12 wheels have a directory per component)
_WHEEL_BIN_DIRS = ("cu13/bin", "cu12/bin", "cuda_cuobjdump/bin", "cuda_nvdisasm/bin")


class SassError(AutoschedError):
    """The SASS of a cubin cannot be read: the disassembler is missing or refused the file."""


def _wheel_dirs() -> list[Path]:
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(root) / sub for root in spec.submodule_search_locations for sub in _WHEEL_BIN_DIRS]


@functools.cache
def find_tool(name: str) -> Path:
    """The path of a CUDA binary tool (`cuobjdump`, `nvdisasm`): on PATH, in an NVIDIA wheel, or
    under CUDA_HOME; SassError naming the wheel to install when none has it."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for d in [*_wheel_dirs(), Path(cuda_home) / "bin"]:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    raise SassError(f"{name} not found (on PATH, in the nvidia-cuda-{name} wheel or under {cuda_home}/bin): "
                    f"pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm to read SASS")


def sass_available() -> bool:
    """Whether both `cuobjdump` and the `nvdisasm` it runs can be found."""
    try:
        find_tool("cuobjdump")
        find_tool("nvdisasm")
    except SassError:
        return False
    return True


_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
# `/*0050*/  @!P0 LDG.E.128 R4, [R2.64] ;` -> the mnemonic with its modifiers
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_.]*)")


def disassemble(cubin: str | os.PathLike[str]) -> dict[str, list[str]]:
    """kernel name -> its instructions' mnemonics with modifiers (`LDG.E.128`, `HMMA.1688.F32.TF32`),
    in program order, from `cuobjdump -sass`."""
    cuobjdump, nvdisasm = find_tool("cuobjdump"), find_tool("nvdisasm")
    env = {**os.environ, "PATH": f"{nvdisasm.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        proc = subprocess.run([str(cuobjdump), "-sass", str(cubin)], capture_output=True, text=True, env=env,
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise SassError(f"cuobjdump -sass {cubin} did not finish within 120 s") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise SassError(f"cuobjdump -sass {cubin} failed: {detail[-1] if detail else f'exit {proc.returncode}'}")
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in proc.stdout.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = kernels.setdefault(m.group(1), [])
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current.append(m.group(1))
    if not kernels:
        raise SassError(f"cuobjdump -sass {cubin} printed no kernel")
    return kernels


@dataclass(frozen=True)
class SassProfile:
    """The static instruction mix of one kernel: mnemonic (with modifiers) -> how many."""

    kernel: str
    opcodes: Mapping[str, int] = field(default_factory=dict)

    def count(self, op: str, width: int | None = None) -> int:
        """Instructions whose base opcode is `op` (`LDG`, `HMMA`), and with `width` those whose
        modifiers include that access width in bits (`LDS.128`, `LDG.E.128`)."""
        total = 0
        for mnemonic, n in self.opcodes.items():
            base, *mods = mnemonic.split(".")
            if base == op and (width is None or str(width) in mods):
                total += n
        return total

    @property
    def total(self) -> int:
        return sum(self.opcodes.values())

    @property
    def spills(self) -> int:
        """Local-memory loads and stores: registers spilled (or arrays ptxas could not keep in registers)."""
        return self.count("LDL") + self.count("STL")

    def summary(self) -> dict[str, int]:
        """The figures a reader of a kernel looks for first, by name."""
        return {"instructions": self.total, "ffma": self.count("FFMA"), "hmma": self.count("HMMA"),
                "ldgsts": self.count("LDGSTS"), "ldg128": self.count("LDG", 128), "lds128": self.count("LDS", 128),
                "ldg": self.count("LDG"), "lds": self.count("LDS"), "ldsm": self.count("LDSM"), "sts": self.count("STS"),
                "shfl": self.count("SHFL"), "bar": self.count("BAR"), "local": self.spills}


def read_sass(cubin: str | os.PathLike[str]) -> dict[str, SassProfile]:
    """kernel name -> instruction mix of every kernel in `cubin`."""
    return {name: SassProfile(name, dict(Counter(ops))) for name, ops in disassemble(cubin).items()}


def kernel_sass(cubin: str | os.PathLike[str], kernel: str) -> SassProfile:
    """The instruction mix of `kernel` in `cubin`; SassError naming the kernels there if absent."""
    profiles = read_sass(cubin)
    if kernel not in profiles:
        raise SassError(f"{cubin} has no kernel {kernel!r} (it has {', '.join(sorted(profiles))})")
    return profiles[kernel]


__all__ = ["SassError", "SassProfile", "disassemble", "find_tool", "kernel_sass", "read_sass", "sass_available"]
