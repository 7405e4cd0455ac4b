import pytest

from autosched.target import CpuInfo, GpuCapabilities, Target, TargetError, read_cache_sizes, read_cpuinfo

ZEN5 = CpuInfo("AMD EPYC 9R45", frozenset({"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "hypervisor"}))
HASWELL = CpuInfo("Intel Core i7-4770", frozenset({"sse4_2", "avx", "avx2", "fma"}))
OLD = CpuInfo("Intel Core 2", frozenset({"sse4_1"}))

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R45
flags\t\t: fpu sse4_2 avx avx2 avx512f hypervisor

processor\t: 1
model name\t: AMD EPYC 9R45
flags\t\t: fpu sse4_2 avx avx2 avx512f hypervisor
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes
CPU part\t: 0xd0c
"""


def _shape(target):
    caps = target.capabilities
    return target.isa, caps.vector_bytes, caps.vector_registers


def test_llvm_vector_width_and_registers_follow_cpu_flags():
    assert _shape(Target.parse("llvm", host=ZEN5)) == ("x86_64-avx512", 64, 32)
    assert _shape(Target.parse("llvm", host=HASWELL)) == ("x86_64-avx2", 32, 16)
    assert _shape(Target.parse("llvm", host=OLD)) == ("x86_64-sse2", 16, 16)
    caps = Target.parse("llvm", host=HASWELL).capabilities
    assert caps.cflags == ("-march=native",) and caps.fma and caps.lanes(4) == 8 and caps.lanes(8) == 4


def test_mattr_overrides_host_flags():
    narrowed = Target.parse("llvm -mattr=-avx512f", host=ZEN5)
    assert _shape(narrowed) == ("x86_64-avx2", 32, 16)
    assert "avx512bw" not in narrowed.capabilities.flags  # dropped with the extension it builds on
    assert narrowed.capabilities.cflags == ("-march=native", "-mno-avx512f")
    assert Target.parse("llvm -mattr=+avx512f", host=HASWELL).capabilities.vector_bytes == 64


def test_mcpu_selects_the_isa_whatever_the_host():
    """-mcpu compiles for the named CPU: AVX2 code on an AVX-512 host, and the reverse (to build
    and read, not to run). gcc is the authority on what the name enables."""
    for host in (ZEN5, HASWELL):
        hsw = Target.parse("llvm -mcpu=haswell", host=host)
        assert _shape(hsw) == ("x86_64-avx2", 32, 16) and hsw.capabilities.cflags == ("-march=haswell",)
        assert {"avx2", "fma"} <= hsw.capabilities.flags and "avx512f" not in hsw.capabilities.flags
        skx = Target.parse("llvm -mcpu=skylake-avx512", host=host)
        assert _shape(skx) == ("x86_64-avx512", 64, 32)
    assert _shape(Target.parse("llvm -mcpu=skylake-avx512 -mattr=-avx512f", host=ZEN5)) == ("x86_64-avx2", 32, 16)
    with pytest.raises(TargetError, match="'llvm -mcpu=nosuchcpu': gcc refuses -march=nosuchcpu"):
        Target.parse("llvm -mcpu=nosuchcpu", host=ZEN5)


def test_llvm_fingerprint_names_cpu_and_isa_only():
    t = Target.parse("llvm -mcpu=skylake-avx512", host=ZEN5)
    assert t.kind == "llvm" and t.option("mcpu") == "skylake-avx512" and t.option("mattr") is None
    assert "AMD EPYC 9R45" in t.fingerprint and "avx512f" in t.fingerprint and "mcpu=skylake-avx512" in t.fingerprint
    assert "hypervisor" not in t.fingerprint
    assert t.fingerprint != Target.parse("llvm", host=ZEN5).fingerprint
    assert t.fingerprint != Target.parse("llvm -mcpu=skylake-avx512", host=HASWELL).fingerprint
    assert t.ray_resource == "CPU"


def test_canonical_string_round_trips():
    t = Target.parse("llvm   -mcpu=skylake-avx512 -mattr=+avx2,-avx512f", host=ZEN5)
    assert str(t) == "llvm -mattr=+avx2,-avx512f -mcpu=skylake-avx512"
    assert Target.parse(str(t), host=ZEN5) == t


def test_cuda_target():
    t = Target.parse("cuda -arch=sm_90")
    assert t.fingerprint == "cuda|sm_90"
    assert t.ray_resource == "GPU"
    assert isinstance(t.capabilities, GpuCapabilities) and t.capabilities.arch == "sm_90"
    assert t.capabilities.max_threads_per_block == 1024
    assert t.capabilities.max_shared_memory_per_block == 48 * 1024
    assert t.capabilities.warp_size == 32
    assert str(Target.parse("cuda -arch=sm_90a")) == "cuda -arch=sm_90a"


@pytest.mark.parametrize("text, message", [
    ("", "empty target"),
    ("   ", "empty target"),
    ("opencl", "unknown target kind 'opencl'.*known kinds: llvm, cuda"),
    ("LLVM", "unknown target kind"),
    ("cuda -arch=sm90", "bad value 'sm90' for -arch"),
    ("cuda -mcpu=x", "unknown option -mcpu for 'cuda'"),
    ("llvm -arch=sm_90", "unknown option -arch for 'llvm'"),
    ("llvm mcpu=znver5", "not of the form -name=value"),
    ("llvm -mcpu", "not of the form"),
    ("llvm -mcpu=znver5 -mcpu=znver4", "given twice"),
    ("llvm -mcpu=znver5;rm", "bad value"),
    ("llvm -mcpu=$(id)", "bad value"),
    ("llvm -mattr=avx2", "bad value 'avx2' for -mattr"),
])
def test_bad_target_strings(text, message):
    with pytest.raises(TargetError, match=message):
        Target.parse(text, host=ZEN5)


def test_read_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text(X86_CPUINFO)
    info = read_cpuinfo(x86)
    assert info.model == "AMD EPYC 9R45" and {"avx2", "avx512f"} <= info.flags and info.vendor == "amd"
    assert Target.parse("llvm", host=info).capabilities.vendor == "amd"
    arm = tmp_path / "arm"
    arm.write_text(ARM_CPUINFO)
    info = read_cpuinfo(arm)
    assert info.model == "0xd0c" and "asimd" in info.flags and info.vendor is None
    assert _shape(Target.parse("llvm", host=info)) == ("aarch64-neon", 16, 32)
    assert Target.parse("llvm", host=info).capabilities.cflags == ("-mcpu=native",)
    missing = read_cpuinfo(tmp_path / "nope")
    assert missing.flags == frozenset() and missing.model


def test_cache_sizes_come_from_sysfs(tmp_path):
    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                                 (3, "Unified", "32M")]):
        d = tmp_path / f"index{index}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert read_cache_sizes(tmp_path) == (48 << 10, 1 << 20, 32 << 20)
    assert read_cache_sizes(tmp_path / "missing") == (None, None, None)


def test_host_target_parses():
    t = Target.parse("llvm")
    assert t.capabilities.vector_bytes in (16, 32, 64)
    assert t.fingerprint.startswith("llvm|")


def test_the_vendor_of_the_cores_comes_from_mcpu_else_from_the_host():
    """A default measured on one vendor's cores follows the cores the target names: -mcpu's, or the
    host's for a native target; never the ISA class, which decides which records apply."""
    amd = CpuInfo("AMD EPYC 9R45", ZEN5.flags, vendor="amd")
    assert Target.parse("llvm", host=amd).capabilities.vendor == "amd"
    assert Target.parse("llvm -mcpu=skylake-avx512", host=amd).capabilities.vendor == "intel"
    assert Target.parse("llvm -mcpu=znver3", host=HASWELL).capabilities.vendor == "amd"
    assert Target.parse("llvm -mcpu=x86-64-v4", host=amd).capabilities.vendor is None
    assert Target.parse("llvm", host=ZEN5).capabilities.vendor is None  # no vendor_id read
    assert Target.parse("llvm -mcpu=skylake-avx512", host=amd).isa == Target.parse("llvm", host=amd).isa


def test_the_core_comes_from_mcpu_else_from_an_amd_hosts_family():
    """Zen 4 and Zen 5 share the ISA class and the vendor; cpuinfo's family (25 with AVX-512:
    Zen 4, 26: Zen 5) tells them apart, and a named -mcpu wins over the host."""
    def host(family, flags=ZEN5.flags, vendor="amd"):
        return CpuInfo("AMD EPYC", flags, vendor=vendor, family=family)
    assert Target.parse("llvm", host=host(26)).capabilities.core == "znver5"
    assert Target.parse("llvm", host=host(25)).capabilities.core == "znver4"
    assert Target.parse("llvm", host=host(25, HASWELL.flags)).capabilities.core == "znver3"
    assert Target.parse("llvm -mcpu=znver3", host=host(26)).capabilities.core == "znver3"
    assert Target.parse("llvm", host=host(6, vendor="intel")).capabilities.core is None
    assert Target.parse("llvm", host=host(None)).capabilities.core is None


def test_cpuinfo_gives_the_family(tmp_path):
    (tmp_path / "cpuinfo").write_text("vendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                                      "model name\t: AMD EPYC\nflags\t\t: avx2 avx512f\n\n")
    info = read_cpuinfo(tmp_path / "cpuinfo")
    assert (info.vendor, info.family) == ("amd", 26)
