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

import functools
import logging
import os
import platform
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from autosched.errors import AutoschedError


class TargetError(AutoschedError):
    """A target string that names an unknown kind or carries a bad option."""


@dataclass(frozen=True)
class CpuInfo:
    """What /proc/cpuinfo says about the host: model name and ISA flags (and, for the real host,
    its machine name, cache sizes and vendor)."""

    model: str
    flags: frozenset[str]
    machine: str = "x86_64"
    cache_bytes: tuple[int | None, int | None, int | None] = (None, None, None)
    vendor: str | None = None  # "intel" or "amd" (cpuinfo's vendor_id)
    family: int | None = None  # cpuinfo's "cpu family" (AMD's 25: Zen 3 and 4; 26: Zen 5)


@dataclass(frozen=True)
class CpuCapabilities:
    """What schedules need to know about a CPU's ISA: every register tile, vector width and
    compile flag is sized from here, never from the machine the code happened to be written on."""

    vector_bytes: int  # widest SIMD register the effective ISA allows
    vector_registers: int  # architectural SIMD registers (16 ymm on AVX2, 32 zmm on AVX-512, 32 NEON)
    isa: str  # coarse ISA class ("x86_64-avx512"): what records and caches must never cross
    flags: frozenset[str]  # effective ISA flags, in /proc/cpuinfo's names
    cflags: tuple[str, ...]  # the compiler flags selecting this ISA
    fma: bool = True
    cache_bytes: tuple[int | None, int | None, int | None] = (None, None, None)  # L1d, L2, L3 of the host
    #: "intel" or "amd" (None: unknown): whose cores the code runs on. A few defaults measured on
    #: one vendor's cores depend on it; the ISA class, and so which records apply, never does
    vendor: str | None = None
    #: gcc's -march name of the core design ("znver5") where a default depends on more than the
    #: vendor (None: not known). AMD's Zen 4 executes a 512-bit operation as two 256-bit halves,
    #: Zen 5 at full width, so on Zen 5 a half-width vector does half a full one's work per
    #: instruction and padding to whole vectors pays more (`pad_channels.max_waste`)
    core: str | None = None

    def lanes(self, dtype_bytes: int) -> int:
        """Elements of a `dtype_bytes`-wide type in one vector register."""
        return max(1, self.vector_bytes // dtype_bytes)

    @property
    def byte_dot(self) -> bool:
        """Whether the vectors multiply bytes four at a time into int32 lanes (x86's VNNI, as
        vpdpbusd at this vector width): what int8 products (`IntegerMatMul`) need to beat float."""
        if self.vector_bytes >= 64:
            return "avx512_vnni" in self.flags
        return self.vector_bytes == 32 and ("avx_vnni" in self.flags or {"avx512_vnni", "avx512vl"} <= self.flags)


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
    max_warps_per_sm: int = 64  # resident warps of one multiprocessor
    max_blocks_per_sm: int = 32
    shared_memory_per_sm: int = 164 * 1024  # what resident blocks share (per block, 1 KiB more is reserved)

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) from the arch name: sm_90a -> (9, 0)."""
        m = re.match(r"sm_([0-9]+)", self.arch)
        if m is None:
            raise TargetError(f"cuda arch {self.arch!r} is not of the form sm_NN")
        digits = m.group(1)
        return int(digits[:-1]), int(digits[-1])


#: blocks a GPU kernel's grid should have (`Target.gpu_blocks`)
GPU_BLOCKS = 96

#: compute capability -> opt-in shared memory per block (bytes); the other limits are common
#: to every architecture since Volta (CUDA C Programming Guide, table of technical specifications)
log = logging.getLogger("autosched.target")

_SHARED_OPTIN = {(7, 0): 96 * 1024, (7, 2): 96 * 1024, (7, 5): 64 * 1024, (8, 0): 163 * 1024,
                 (8, 6): 99 * 1024, (8, 7): 163 * 1024, (8, 9): 99 * 1024, (9, 0): 227 * 1024,
                 (10, 0): 227 * 1024, (10, 3): 227 * 1024, (11, 0): 227 * 1024, (12, 0): 99 * 1024,
                 (12, 1): 99 * 1024}
#: compute capability -> (resident warps, resident blocks, shared memory) per multiprocessor,
#: which bound occupancy (same source)
_PER_SM = {(7, 0): (64, 32, 96 * 1024), (7, 5): (32, 16, 64 * 1024), (8, 0): (64, 32, 164 * 1024),
           (8, 6): (48, 16, 100 * 1024), (8, 7): (48, 16, 164 * 1024), (8, 9): (48, 24, 100 * 1024),
           (9, 0): (64, 32, 228 * 1024), (10, 0): (64, 32, 228 * 1024), (12, 0): (48, 32, 100 * 1024)}
DEFAULT_CUDA_ARCH = "sm_80"
#: what the fingerprint and ISA class of a cuda target's CPU-emulation records start with
EMULATED_CUDA = "cuda-emulated"


Capabilities = CpuCapabilities | GpuCapabilities

# ISA flags that change generated code; other cpuinfo flags (bugs, hypervisor,
# power management) would split the database without meaning anything.
_ISA_FLAGS = frozenset({
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "sve", "sve2",
})
_BASELINE_VECTOR_BYTES = 16  # SSE2 on x86-64, NEON on aarch64

_OPTION = re.compile(r"-([a-z][a-z0-9-]*)=(.+)\Z")


def read_cpuinfo(path: str | os.PathLike[str] = "/proc/cpuinfo") -> CpuInfo:
    """The host CPU as the kernel reports it; a bare description where the file
    does not exist (non-Linux hosts)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return CpuInfo(model=platform.processor() or platform.machine() or "unknown", flags=frozenset(),
                       machine=platform.machine())
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
    machine = "aarch64" if "asimd" in flags.split() else platform.machine()
    vendor = _VENDOR_IDS.get(fields.get("vendor_id", ""))
    family = fields.get("cpu family", "")
    return CpuInfo(model=model, flags=frozenset(flags.split()), machine=machine, cache_bytes=read_cache_sizes(),
                   vendor=vendor, family=int(family) if family.isdigit() else None)


_VENDOR_IDS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}
#: gcc's -march names of AMD's and Intel's cores, by prefix (x86-64-v4 and the like name no vendor)
_AMD_CPUS = ("znver", "bdver", "btver", "amdfam", "k8", "athlon", "opteron", "barcelona")
_INTEL_CPUS = ("nehalem", "westmere", "sandybridge", "ivybridge", "haswell", "broadwell", "skylake", "cascadelake",
               "cooperlake", "cannonlake", "icelake", "tigerlake", "rocketlake", "alderlake", "raptorlake",
               "meteorlake", "arrowlake", "lunarlake", "pantherlake", "sapphirerapids", "emeraldrapids",
               "graniterapids", "diamondrapids", "sierraforest", "grandridge", "clearwaterforest", "knl", "knm",
               "bonnell", "silvermont", "goldmont", "tremont", "gracemont")


def vendor_of_model(model: str) -> str | None:
    """The vendor a CPU's model name (cpuinfo's, as fingerprints carry it) names, if any."""
    words = model.lower().split()
    return "amd" if "amd" in words else "intel" if any(w.startswith("intel") for w in words) else None


def cpu_vendor(mcpu: str | None, host: CpuInfo) -> str | None:
    """The vendor of the cores an -mcpu names (the host's where it names none, or `native`)."""
    if not mcpu or mcpu == "native":
        return host.vendor
    return "amd" if mcpu.startswith(_AMD_CPUS) else "intel" if mcpu.startswith(_INTEL_CPUS) else None


#: gcc's predefined macros -> the /proc/cpuinfo flag they stand for
_GCC_MACROS = {
    "__SSE4_1__": "sse4_1", "__SSE4_2__": "sse4_2", "__AVX__": "avx", "__AVX2__": "avx2", "__FMA__": "fma",
    "__F16C__": "f16c", "__AVX512F__": "avx512f", "__AVX512BW__": "avx512bw", "__AVX512DQ__": "avx512dq",
    "__AVX512VL__": "avx512vl", "__AVX512VNNI__": "avx512_vnni", "__AVX512BF16__": "avx512_bf16",
    "__AVX512FP16__": "avx512_fp16", "__AVXVNNI__": "avx_vnni", "__AMX_TILE__": "amx_tile",
    "__AMX_BF16__": "amx_bf16", "__AMX_INT8__": "amx_int8", "__ARM_NEON": "asimd", "__ARM_FEATURE_SVE": "sve",
    "__ARM_FEATURE_SVE2": "sve2",
}
#: cpuinfo flag -> gcc's -m option name, where dropping the underscore is not enough
_GCC_OPTION_NAMES = {"sse4_1": "sse4.1", "sse4_2": "sse4.2", "amx_tile": "amx-tile", "amx_bf16": "amx-bf16",
                     "amx_int8": "amx-int8"}
_ARM_MACHINES = ("aarch64", "arm64")
#: flag -> prefixes of the flags that need it
_DEPENDENTS = {"avx": ("avx2", "fma", "f16c", "avx512", "avx_vnni", "amx"), "avx2": ("avx512", "avx_vnni", "amx"),
               "avx512f": ("avx512", "amx")}


#: AMD's cpuinfo families -> gcc's name of their core (25 is Zen 3 or, with AVX-512, Zen 4; 23,
#: Zen 1 or 2, names no one core and is left out)
_AMD_FAMILIES = {25: "znver3", 26: "znver5"}


def cpu_core(mcpu: str | None, host: CpuInfo) -> str | None:
    """The core design an -mcpu names, or the host's where it names none (AMD's only: their
    families tell the cores apart; an Intel host's family does not)."""
    if mcpu and mcpu != "native":
        return mcpu
    if host.vendor != "amd" or host.family not in _AMD_FAMILIES:
        return None
    return "znver4" if host.family == 25 and "avx512f" in host.flags else _AMD_FAMILIES[host.family]


def _cpu_option(machine: str) -> str:
    """gcc names the CPU with -march on x86 and with -mcpu on Arm."""
    return "-mcpu" if machine in _ARM_MACHINES else "-march"


@functools.cache
def gcc_isa_flags(cflags: tuple[str, ...], cc: str = "gcc") -> frozenset[str]:
    """The ISA flags gcc enables under `cflags`: the one authority on what ``-march=haswell``
    (or ``-march=native`` on this host) means, so records and caches can be keyed by it."""
    try:
        proc = subprocess.run([cc, *cflags, "-dM", "-E", "-x", "c", os.devnull], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise TargetError(f"cannot ask the C compiler {cc!r} what {' '.join(cflags)} enables: {e}") from None
    if proc.returncode != 0:
        message = next((line for line in proc.stderr.splitlines() if "error" in line), proc.stderr.strip())
        raise TargetError(f"{cc} refuses {' '.join(cflags)}: {message.split('error:')[-1].strip()}")
    macros = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("#define ")}
    return frozenset(flag for macro, flag in _GCC_MACROS.items() if macro in macros)


def _mattr_cflags(mattr: str | None) -> list[str]:
    out = []
    for item in mattr.split(",") if mattr else ():
        name = _GCC_OPTION_NAMES.get(item[1:], item[1:].replace("_", ""))
        out.append(("-m" if item[0] == "+" else "-mno-") + name)
    return out


def _isa_class(flags: frozenset[str], machine: str) -> tuple[str, int, int]:
    """(ISA class, vector bytes, vector registers) of a flag set."""
    if machine in _ARM_MACHINES or "asimd" in flags:
        return ("aarch64-sve" if "sve" in flags else "aarch64-neon"), 16, 32
    arch = "x86_64" if machine in ("x86_64", "amd64", "AMD64", "") else machine
    for flag, name, width in (("avx512f", "avx512", 64), ("avx2", "avx2", 32), ("avx", "avx", 32)):
        if flag in flags:
            return f"{arch}-{name}", width, 32 if width == 64 else 16
    return f"{arch}-sse2", _BASELINE_VECTOR_BYTES, 16


def read_cache_sizes(root: str | os.PathLike[str] = "/sys/devices/system/cpu/cpu0/cache") -> tuple:
    """(L1d, L2, L3) bytes as sysfs reports them for the first CPU; None where it does not."""
    sizes: dict[int, int] = {}
    for index in sorted(Path(root).glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", text)
        if m:
            sizes[level] = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    return tuple(sizes.get(level) for level in (1, 2, 3))


def _describe_llvm(options: Mapping[str, str], host: CpuInfo | None) -> tuple[str, Capabilities]:
    host = host if host is not None else read_cpuinfo()
    machine = host.machine
    mcpu, mattr = options.get("mcpu"), options.get("mattr")
    cflags = (f"{_cpu_option(machine)}={mcpu or 'native'}", *_mattr_cflags(mattr))
    if mcpu:
        chosen = set(gcc_isa_flags(cflags))  # what the named CPU has, whatever this host has
    else:
        chosen = set(host.flags & _ISA_FLAGS)
        for item in mattr.split(",") if mattr else ():
            if item[0] == "+":
                chosen.add(item[1:])
            else:  # as in gcc, dropping an extension drops those built on it
                chosen -= {f for f in chosen if f == item[1:] or f.startswith(_DEPENDENTS.get(item[1:], ()))}
    flags = frozenset(chosen)
    isa, width, registers = _isa_class(flags, machine)
    parts = ["llvm", host.model, ",".join(sorted(flags))]
    parts += [f"{k}={v}" for k, v in sorted(options.items())]
    fma = "fma" in flags or "avx512f" in flags or isa.startswith("aarch64")
    caps = CpuCapabilities(vector_bytes=width, vector_registers=registers, isa=isa, flags=flags, cflags=cflags,
                           fma=fma, cache_bytes=host.cache_bytes, vendor=cpu_vendor(mcpu, host),
                           core=cpu_core(mcpu, host))
    return "|".join(parts), caps


def gpu_capabilities(arch: str) -> GpuCapabilities:
    """The limits of `arch`; an architecture newer than the table takes the newest older entry."""
    caps = GpuCapabilities(arch=arch)
    known = [cc for cc in sorted(_SHARED_OPTIN) if cc <= caps.compute_capability]
    if not known:
        raise TargetError(f"architecture {arch} is older than Volta (sm_70); autosched needs sm_70 or newer")
    warps, blocks, shared = _PER_SM[max(cc for cc in _PER_SM if cc <= caps.compute_capability)]
    return GpuCapabilities(arch=arch, max_shared_memory_per_block_optin=_SHARED_OPTIN[known[-1]],
                           max_warps_per_sm=warps, max_blocks_per_sm=blocks, shared_memory_per_sm=shared)


def detect_gpu() -> tuple[str, str] | None:
    """(name, sm_XX) of this node's first GPU as nvidia-smi reports them, or None without a driver."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"(.+?),\s*([0-9]+)\.([0-9])", out[0].strip()) if out else None
    return (m.group(1), f"sm_{m.group(2)}{m.group(3)}") if m else None


def detect_cuda_arch() -> str | None:
    """The compute capability of this node's first GPU as sm_XX, or None without a driver."""
    found = detect_gpu()
    return None if found is None else found[1]


def _default_cuda_options(given: Mapping[str, str]) -> dict[str, str]:
    """-arch of the GPU here when the user gave none, else sm_80 with a notice."""
    if "arch" in given:
        return {}
    arch = detect_cuda_arch()
    if arch is None:
        arch = DEFAULT_CUDA_ARCH
        log.warning("target cuda: no -arch given and no GPU found; using -arch=%s", arch)
    return {"arch": arch}


#: -precision of a cuda target -> (rtol, atol) a model's outputs are checked with. TF32 and FP16
#: round every matmul and convolution input to 10 mantissa bits (relative error up to 2^-11
#: each), BF16 to 7 (2^-8), and a model chains dozens of them
PRECISION_TOLERANCE = {"fp32": (1e-3, 1e-4), "tf32": (1e-2, 1e-2), "fp16": (1e-2, 1e-2), "bf16": (5e-2, 5e-2)}
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


def _describe_cuda(options: Mapping[str, str], host: CpuInfo | None) -> tuple[str, Capabilities]:
    arch = options["arch"]
    caps = gpu_capabilities(arch)
    precision = options.get("precision", "fp32")
    if precision not in PRECISION_TOLERANCE:
        raise TargetError(f"-precision={precision} is not supported yet; supported: {', '.join(PRECISION_TOLERANCE)}")
    if precision != "fp32" and caps.compute_capability < (8, 0):
        raise TargetError(f"-precision={precision} needs tensor cores of sm_80 or newer, not {arch}")
    # records of one precision never rank another's: its kernels round differently
    return f"cuda|{arch}" + ("" if precision == "fp32" else f"|{precision}"), caps


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
            options={"arch": re.compile(r"sm_[0-9]{2,3}[af]?\Z"), "precision": re.compile(f"(?:{'|'.join(PRECISIONS)})\\Z")},
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
    gpu: str | None = None  # the GPU model a cuda target's records were measured on (on_gpu)
    emulated: bool = False  # records of the CPU emulation (`emulated`): static estimates, not timings

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
        try:
            fingerprint, caps = kind.describe(options, host)
        except TargetError as e:
            raise TargetError(f"target {text!r}: {e}") from None
        return cls(kind=name, options=tuple(sorted(options.items())), fingerprint=fingerprint, capabilities=caps)

    @property
    def ray_resource(self) -> str:
        """The Ray resource a measurement on this target holds: "CPU" or "GPU"."""
        return TARGET_KINDS[self.kind].ray_resource

    @property
    def isa(self) -> str:
        """The coarse ISA class ("x86_64-avx512", "x86_64-avx2", "cuda-sm_90"): code, cached
        objects and tuning records made for one class are never used on another."""
        caps = self.capabilities
        if isinstance(caps, CpuCapabilities):
            return caps.isa
        return f"{EMULATED_CUDA}-{caps.arch}" if self.emulated else f"cuda-{caps.arch}"

    @property
    def layout_lanes(self) -> int | None:
        """float32 lanes of a vector, whose multiples of channels the graph's layout planning
        blocks convolutions into; None for targets whose templates read plain NCHW (cuda)."""
        caps = self.capabilities
        return caps.lanes(4) if isinstance(caps, CpuCapabilities) else None

    @property
    def gpu_blocks(self) -> int | None:
        """Blocks a GPU kernel's grid should have to keep most multiprocessors busy (an A100 has
        108, an H100 132): what the graph's split-K and the fallbacks' tile sizes aim at; None
        for CPU targets."""
        return GPU_BLOCKS if self.kind == "cuda" else None

    def on_gpu(self, name: str) -> Target:
        """This cuda target as measured on the GPU called `name` (cuDeviceGetName): two GPU models
        of one architecture (an H100 and an H200 are both sm_90) time kernels differently, so their
        records carry different fingerprints, as two CPU models of one ISA do."""
        if self.kind != "cuda":
            raise TargetError(f"target {self} is not a cuda target; only GPU measurements name a GPU")
        precision = "" if self.precision == "fp32" else f"|{self.precision}"
        return replace(self, fingerprint=f"cuda|{name}|{self.gpu_capabilities.arch}{precision}", gpu=name)

    def on_this_gpu(self) -> Target:
        """This cuda target as this machine's GPU runs it (`on_gpu`), where the machine has one of
        the target's architecture and the target names none yet: the fingerprint a tune here
        records under, which `db best` and the report look its timings up by. Else unchanged."""
        if self.kind != "cuda" or self.gpu is not None or self.emulated:
            return self
        found = detect_gpu()
        return self.on_gpu(found[0]) if found is not None and found[1] == self.gpu_capabilities.arch else self

    @property
    def precision(self) -> str:
        """The inputs a cuda target's matmuls and convolutions round to: "fp32" (exact, the default),
        or on tensor cores "tf32", "fp16" or "bf16", accumulating in fp32 (opt-in, as cuBLAS and
        cuDNN make TF32)."""
        return self.option("precision") or "fp32"

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) that outputs computed at this target's precision are checked with."""
        return PRECISION_TOLERANCE[self.precision]

    def as_emulated(self) -> Target:
        """This cuda target as its CPU emulation measures it: the records' costs are the static
        model's estimates (the emulation's own run time says nothing about a GPU), so they get a
        fingerprint and an ISA class of their own (`cuda-emulated|sm_80`, `cuda-emulated-sm_80`)
        that no GPU timing shares: nothing that ranks GPU timings ever reads them as one."""
        if self.kind != "cuda":
            raise TargetError(f"target {self} is not a cuda target; only CUDA kernels are emulated")
        return replace(self, fingerprint=f"{EMULATED_CUDA}|{self.gpu_capabilities.arch}", gpu=None, emulated=True)

    @property
    def cpu_capabilities(self) -> CpuCapabilities:
        """`capabilities` where only a CPU target makes sense: a clear error for any other."""
        if not isinstance(self.capabilities, CpuCapabilities):
            raise TargetError(f"target {self} is not a CPU target")
        return self.capabilities

    @property
    def gpu_capabilities(self) -> GpuCapabilities:
        """`capabilities` where only a cuda target makes sense: a clear error for any other."""
        if not isinstance(self.capabilities, GpuCapabilities):
            raise TargetError(f"target {self} is not a cuda target")
        return self.capabilities

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)

    def __str__(self) -> str:
        return " ".join([self.kind] + [f"-{k}={v}" for k, v in self.options])
