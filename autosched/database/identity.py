"""What a record says about where it was measured: the target row's fields.

`isa_of` is the one place that decides which records may stand in for each other across
machines (same ISA class, another CPU model); nothing crosses an ISA.
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from autosched.target import EMULATED_CUDA, Target


def isa_of(target: Target) -> str:
    """The target's coarse ISA class ("x86_64-avx512", "cuda-sm_90"): what records never cross."""
    return target.isa




def is_emulated(fingerprint: str) -> bool:
    """Whether records of `fingerprint` come from the CPU emulation: static estimates under the
    emulated target's own fingerprint, or (`cuda|sm_80`, which names no GPU: every GPU timing
    names its GPU) emulation run times that versions before the split stored as GPU costs."""
    if fingerprint.startswith(EMULATED_CUDA + "|"):
        return True
    parts = fingerprint.split("|")
    return len(parts) == 2 and parts[0] == "cuda"


def tasks_digest(keys: Iterable[str]) -> str:
    """What a tuning session tuned, as its sessions row keeps it: SHA-256 of the model's task
    keys, so the same model copied elsewhere (or renamed) is recognised as the same one."""
    return hashlib.sha256("\n".join(sorted(set(keys))).encode()).hexdigest()


def task_digest(key: str) -> str:
    """A task key as the in-model tables key it: SHA-256 (keys of fused tasks run to kilobytes)."""
    return hashlib.sha256(key.encode()).hexdigest()


@functools.cache
def _gcc_version() -> str | None:
    from autosched.codegen.gcc import compiler_version
    try:
        return compiler_version()
    except Exception:  # noqa: BLE001 - no gcc: the column is informative only
        return None


@dataclass(frozen=True)
class TargetInfo:
    """A targets row: the target string, its hardware fingerprint, ISA class and compiler."""

    target: str
    fingerprint: str
    isa: str
    compiler: str | None

    @classmethod
    def of(cls, target: Target) -> TargetInfo:
        """The row of `target`; the compiler's version where its back end builds with gcc (nvcc's
        is not recorded). The back ends import the measurement stack: imported when needed."""
        from autosched.backend import backend_for
        gcc = backend_for(target).compiler == "gcc"
        return cls(str(target), target.fingerprint, isa_of(target), _gcc_version() if gcc else None)
