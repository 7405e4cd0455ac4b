"""Compilation targets parsed from strings such as ``llvm -mcpu=znver5`` or
``cuda -arch=sm_90``.

A target carries what the rest of the pipeline needs to know about the device:
a hardware fingerprint that keys tuning records (a record tuned on one CPU is
no evidence about another), the Ray resource its measurements occupy, and the
capabilities templates size their knobs with. Each kind is one entry of
`TARGET_KINDS`; option values are checked against a pattern because they end
up on compiler command lines.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from autosched.errors import AutoschedError


class TargetError(AutoschedError):
    """A target string that names an unknown kind or carries a bad option."""


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the host: model name and ISA flags."""

    model: str
    flags: frozenset[str]


@dataclass(frozen=True)
class CpuCapabilities:
    vector_bytes: int  # widest SIMD register the effective ISA allows


@dataclass(frozen=True)
class GpuCapabilities:
    """Per-architecture device limits: what a CUDA schedule is checked against before it
    reaches nvcc or a device (a config over a limit can never launch)."""

    arch: str
    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 48 * 1024  # static __shared__ limit
    max_shared_memory_per_block_optin: int = 48 * 1024  # dynamic shared memory after cudaFuncSetAttribute
    max_registers_per_thread: int = 255
    registers_per_sm: int = 64 * 1024
    warp_size: int = 32

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) from the arch name: sm_90a -> (9, 0)."""
        digits = re.match(r"sm_([0-9]+)", self.arch).group(1)
        return int(digits[:-1]), int(digits[-1])

    @property
    def isa(self) -> str:
        return f"cuda-{self.arch}"


class TargetNotice(UserWarning):
    """A default the user did not choose (no -arch given and no GPU to ask)."""


#: compute capability -> opt-in shared memory per block (bytes); the other limits are common
#: to every architecture since Volta (CUDA C Programming Guide, table of technical specifications)
_SHARED_OPTIN = {(7, 0): 96 * 1024, (7, 2): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 163 * 1024,
                 (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024, (9, 0): 227 * 1024,
                 (10, 0): 227 * 1024, (10, 3): 227 * 1024, (11, 0): 227 * 1024, (12, 0): 99 * 1024,
                 (12, 1): 99 * 1024}
DEFAULT_CUDA_ARCH = "sm_80"


Capabilities = Union[CpuCapabilities, GpuCapabilities]

# ISA flags that change generated code; other cpuinfo flags (bugs, hypervisor,
# power management) would split the database without meaning anything.
_ISA_FLAGS = frozenset({
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "sve", "sve2",
})
# Widest vector first: the first flag present decides the vector width.
_VECTOR_BYTES = (("avx512f", 64), ("avx2", 32), ("avx", 32), ("asimd", 16))
_BASELINE_VECTOR_BYTES = 16  # SSE2 on x86-64, NEON on aarch64

_OPTION = re.compile(r"-([a-z][a-z0-9-]*)=(.+)\Z")


def read_cpuinfo(path: str | os.PathLike[str] = "/proc/cpuinfo") -> CpuInfo:
    """The host CPU as the kernel reports it; a bare description where the file
    does not exist (non-Linux hosts)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return CpuInfo(model=platform.processor() or platform.machine() or "unknown", flags=frozenset())
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # first processor block is enough
            continue
        fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or fields.get("CPU part") or platform.machine() or "unknown"
    flags = fields.get("flags") or fields.get("Features") or ""
    return CpuInfo(model=model, flags=frozenset(flags.split()))


def _effective_flags(host: CpuInfo, mattr: str | None) -> frozenset[str]:
    flags = set(host.flags & _ISA_FLAGS)
    for item in (mattr.split(",") if mattr else ()):
        (flags.add if item[0] == "+" else flags.discard)(item[1:])
    return frozenset(flags)


def _describe_llvm(options: Mapping[str, str], host: CpuInfo | None) -> tuple[str, Capabilities]:
    host = host if host is not None else read_cpuinfo()
    flags = _effective_flags(host, options.get("mattr"))
    width = next((b for flag, b in _VECTOR_BYTES if flag in flags), _BASELINE_VECTOR_BYTES)
    parts = ["llvm", host.model, ",".join(sorted(flags))]
    parts += [f"{k}={v}" for k, v in sorted(options.items())]
    return "|".join(parts), CpuCapabilities(vector_bytes=width)


def gpu_capabilities(arch: str) -> GpuCapabilities:
    """The limits of `arch`; an architecture newer than the table takes the newest older entry."""
    caps = GpuCapabilities(arch=arch)
    known = [cc for cc in sorted(_SHARED_OPTIN) if cc <= caps.compute_capability]
    if not known:
        raise TargetError(f"architecture {arch} is older than Volta (sm_70); autosched needs sm_70 or newer")
    return GpuCapabilities(arch=arch, max_shared_memory_per_block_optin=_SHARED_OPTIN[known[-1]])


def detect_cuda_arch() -> str | None:
    """The compute capability of this node's first GPU as sm_XX, or None without a driver."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"([0-9]+)\.([0-9])", out[0]) if out else None
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def _default_cuda_options(given: Mapping[str, str]) -> dict[str, str]:
    """-arch of the GPU here when the user gave none, else sm_80 with a notice."""
    if "arch" in given:
        return {}
    arch = detect_cuda_arch()
    if arch is None:
        arch = DEFAULT_CUDA_ARCH
        warnings.warn(f"target cuda: no -arch given and no GPU found; using -arch={arch}", TargetNotice, stacklevel=4)
    return {"arch": arch}


def _describe_cuda(options: Mapping[str, str], host: CpuInfo | None) -> tuple[str, Capabilities]:
    arch = options["arch"]
    return f"cuda|{arch}", gpu_capabilities(arch)


@dataclass(frozen=True)
class TargetKind:
    """One back end: its options (name → value pattern), which are required,
    its Ray resource and how to describe its hardware."""

    name: str
    options: Mapping[str, re.Pattern[str]]
    required: frozenset[str]
    ray_resource: str
    describe: Callable[[Mapping[str, str], CpuInfo | None], tuple[str, Capabilities]]
    defaults: Callable[[Mapping[str, str]], Mapping[str, str]] = lambda given: {}  # options to fill in


TARGET_KINDS: Mapping[str, TargetKind] = {
    kind.name: kind
    for kind in (
        TargetKind(
            name="llvm",
            options={"mcpu": re.compile(r"[A-Za-z0-9_.-]+\Z"), "mattr": re.compile(r"[+-][a-z0-9_]+(,[+-][a-z0-9_]+)*\Z")},
            required=frozenset(),
            ray_resource="CPU",
            describe=_describe_llvm,
        ),
        TargetKind(
            name="cuda",
            options={"arch": re.compile(r"sm_[0-9]{2,3}[af]?\Z")},
            required=frozenset(),
            ray_resource="GPU",
            describe=_describe_cuda,
            defaults=_default_cuda_options,
        ),
    )
}


@dataclass(frozen=True)
class Target:
    """A parsed target; `str(target)` is its canonical string."""

    kind: str
    options: tuple[tuple[str, str], ...]
    fingerprint: str
    capabilities: Capabilities

    @classmethod
    def parse(cls, text: str, host: CpuInfo | None = None) -> Target:
        """Parse ``KIND [-OPTION=VALUE ...]``. `host` replaces /proc/cpuinfo for
        CPU kinds (tests, cross-tuning from records)."""
        if not isinstance(text, str) or not text.split():
            raise TargetError(f"empty target string {text!r}; known kinds: {', '.join(TARGET_KINDS)}")
        name, *tokens = text.split()
        kind = TARGET_KINDS.get(name)
        if kind is None:
            raise TargetError(f"unknown target kind {name!r} in {text!r}; known kinds: {', '.join(TARGET_KINDS)}")
        options: dict[str, str] = {}
        for token in tokens:
            m = _OPTION.match(token)
            if m is None:
                raise TargetError(f"target {text!r}: option {token!r} is not of the form -name=value")
            key, value = m.groups()
            if key not in kind.options:
                allowed = ", ".join(f"-{k}" for k in kind.options)
                raise TargetError(f"target {text!r}: unknown option -{key} for {name!r}; allowed: {allowed}")
            if key in options:
                raise TargetError(f"target {text!r}: option -{key} given twice")
            if not kind.options[key].match(value):
                raise TargetError(f"target {text!r}: bad value {value!r} for -{key}")
            options[key] = value
        options.update(kind.defaults(options))
        missing = sorted(kind.required - options.keys())
        if missing:
            example = {"arch": "sm_90"}.get(missing[0], "...")
            raise TargetError(f"target {text!r} needs -{missing[0]}= (e.g. '{name} -{missing[0]}={example}')")
        fingerprint, caps = kind.describe(options, host)
        return cls(kind=name, options=tuple(sorted(options.items())), fingerprint=fingerprint, capabilities=caps)

    @property
    def ray_resource(self) -> str:
        """The Ray resource a measurement on this target holds: "CPU" or "GPU"."""
        return TARGET_KINDS[self.kind].ray_resource

    @property
    def isa(self) -> str:
        """The instruction set generated code is built for; for cuda "cuda-sm_90"."""
        return self.capabilities.isa

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.options])
