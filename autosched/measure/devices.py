"""Ray custom resources that name autosched's devices and toolchains.

A fleet routes work by resource: a node advertises one resource per measuring device
(one per CPU ISA class, one per GPU compute capability) and one per toolchain (its cores,
for parallel builds); a candidate asks for the resources its back end names (`autosched.backend`,
which picks among the names made here). This module is the one place where a target's name
meets a node's hardware, so the name a driver asks for and the name a worker advertises cannot
drift apart.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess

from autosched.errors import AutoschedError
from autosched.target import Target

NVCC_RESOURCE = "autosched-nvcc"
PREFIX = "autosched-"


class FleetError(AutoschedError):
    """A fleet that cannot take the work: not started, not reachable, wrong token, no such device."""


def _isa(target: Target) -> str:
    """`Target.isa` where the target has one, else a digest of its fingerprint."""
    return getattr(target, "isa", None) or hashlib.sha256(target.fingerprint.encode()).hexdigest()[:12]


def cpu_device(target: Target) -> str:
    """The resource of a CPU that may measure `target`: one per ISA class."""
    return f"{PREFIX}cpu-{_isa(target)}"


def gpu_device(target: Target) -> str:
    """The resource of a GPU that may measure `target`: one per compute capability."""
    return f"{PREFIX}gpu-{target.gpu_capabilities.arch}"


def gcc_toolchain(target: Target) -> str:
    """The resource of a gcc build slot for `target`: gcc builds with -march=native, so only
    for its own host's ISA class (until the flags follow the target)."""
    return f"{PREFIX}gcc-{_isa(target)}"


def nvcc_toolchain(target: Target) -> str:
    """The resource of an nvcc build slot: nvcc builds for any arch."""
    return NVCC_RESOURCE


def _gpu_archs() -> list[str]:
    """`sm_XY` of each NVIDIA GPU of this machine ([] without nvidia-smi or a driver)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [f"sm_{m.group(1)}{m.group(2)}" for m in re.finditer(r"(\d+)\.(\d+)", out)]


def detect_resources(build_slots: int | None = None) -> dict[str, float]:
    """The resources this machine offers a fleet: its CPU as one device, each GPU as one,
    and `build_slots` (default: all cores) parallel builds per toolchain it has."""
    slots = float(build_slots or os.cpu_count() or 1)
    host = Target.parse("llvm")
    resources: dict[str, float] = {cpu_device(host): 1.0}
    for arch in _gpu_archs():
        name = gpu_device(Target.parse(f"cuda -arch={arch}"))
        resources[name] = resources.get(name, 0.0) + 1.0
    if shutil.which("gcc"):
        resources[gcc_toolchain(host)] = slots
    if shutil.which("nvcc"):
        resources[NVCC_RESOURCE] = slots
    return resources
