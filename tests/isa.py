"""Targets of more than one ISA, for the tests that read or run generated code on any x86-64 host.

Code is compiled for AVX2 (``-mcpu=haswell``) and AVX-512 (``-mcpu=skylake-avx512``) wherever
the tests run, and its assembly checked for each; it is run only where the host has the ISA.
"""
from __future__ import annotations

from autosched.target import Target, read_cpuinfo

HOST = Target.parse("llvm")
AVX2 = Target.parse("llvm -mcpu=haswell")
AVX512 = Target.parse("llvm -mcpu=skylake-avx512")
#: ISA -> (target, the register class its vector code uses, float32 lanes)
ISAS = {"avx2": (AVX2, "ymm", 8), "avx512": (AVX512, "zmm", 16)}


def runs_here(target: Target) -> bool:
    """Whether this host can execute code built for `target`."""
    return target.capabilities.flags <= read_cpuinfo().flags


#: the targets whose default schedules the op tests run: AVX2 and the host, once per distinct
#: register shape (on an AVX2 host the two are the same)
RUN_TARGETS = list({(t.capabilities.vector_bytes, t.capabilities.vector_registers): t
                    for t in (AVX2, HOST) if runs_here(t)}.values())


def byte_dot_registers(library) -> set[str]:
    """The register classes ("zmm", "ymm") of the vpdpbusd instructions (VNNI's int8 dot
    products) in a built kernel's assembly; empty where it has none."""
    import re
    import subprocess

    asm = subprocess.run(["objdump", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"\svpdpbusd\s+%(\w{3})", asm)}
