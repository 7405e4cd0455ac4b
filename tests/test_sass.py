"""The SASS reader: instruction mixes of cubins nvcc builds here (no GPU needed), and occupancy."""
import pytest

from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.gpu import LaunchGeometry, occupancy, plan_kernel
from autosched.codegen.nvcc import compile_cuda
from autosched.codegen.sass import SassError, SassProfile, find_tool, kernel_sass, read_sass
from autosched.lower import lower
from autosched.target import gpu_capabilities
from tests.cuda_markers import ARCHS, needs_nvcc
from tests.gpu_schedules import tiled_matmul

SHUFFLE = """
extern "C" __global__ void row_sum(const float4* x, float* out) {
    float4 v = x[blockIdx.x * 32 + threadIdx.x];
    float s = v.x + v.y + v.z + v.w;
    for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1) s += __shfl_xor_sync(0xffffffffu, s, lane_mask);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
extern "C" __global__ void spill(const float* x, float* out, int k) {
    float a[256];
    for (int i = 0; i < 256; ++i) a[i] = x[i * k + threadIdx.x];
    a[k & 255] += 1.0f;
    out[threadIdx.x] = a[(threadIdx.x * 7) & 255];
}
"""


def test_profile_counts_by_opcode_and_width():
    p = SassProfile("k", {"LDG.E.128": 2, "LDG.E": 3, "LDS.128": 4, "LDS.U.64": 1, "LDL.64": 1, "STL": 2,
                          "SHFL.BFLY": 5, "HMMA.1688.F32.TF32": 8})
    assert p.count("LDG") == 5 and p.count("LDG", 128) == 2 and p.count("LDS", 128) == 4 and p.count("LDS", 64) == 1
    assert p.spills == 3 and p.count("HMMA") == 8 and p.total == 26
    assert p.summary()["shfl"] == 5 and p.summary()["ldg128"] == 2 and p.summary()["local"] == 3


def test_missing_tool_names_the_wheel(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.setattr("autosched.codegen.sass._wheel_dirs", lambda: [])
    find_tool.cache_clear()
    try:
        with pytest.raises(SassError, match="pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"):
            find_tool("cuobjdump")
    finally:
        find_tool.cache_clear()


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_shuffles_and_spills_are_visible(tmp_path, arch):
    built = compile_cuda(SHUFFLE, arch, cache_dir=tmp_path, flags=("-O3",))
    profiles = read_sass(built.path)
    assert set(profiles) == {"row_sum", "spill"}
    row_sum = profiles["row_sum"]
    assert row_sum.count("SHFL") == 5 and row_sum.count("LDG", 128) == 1 and row_sum.spills == 0
    # a dynamically indexed array lives in local memory: LDL/STL, as ptxas's stack frame says
    assert profiles["spill"].spills > 0 and built.usage["spill"].stack_bytes > 0


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_vectorized_tiled_matmul_loads_128_bits(tmp_path, arch):
    s, args = tiled_matmul(256, 256, 256, block=(64, 64, 8), thread=(4, 4), vec=4)
    func = lower(s, args, "mm")
    built = compile_cuda(CudaRenderer().render(func), arch, cache_dir=tmp_path)
    sass = kernel_sass(built.path, "mm")
    assert sass.count("FFMA") >= 4 * 4 * 8  # the unrolled register tile of one k step
    assert sass.count("LDS", 128) > 0 and sass.count("LDG", 128) > 0 and sass.spills == 0
    assert sass.count("BAR") >= 2 and sass.count("HMMA") == 0
    with pytest.raises(SassError, match="has no kernel 'nope' \\(it has mm\\)"):
        kernel_sass(built.path, "nope")
    geometry, caps = plan_kernel(func).geometry, gpu_capabilities(arch)
    assert 0 < occupancy(geometry, caps, built.usage["mm"].registers) <= 1


def test_occupancy_limits():
    a100, rtx = gpu_capabilities("sm_80"), gpu_capabilities("sm_86")
    block256 = LaunchGeometry((1, 1, 1), (256, 1, 1), 0)
    assert occupancy(block256, a100, 32) == 1.0  # 8 blocks of 8 warps
    assert occupancy(block256, a100, 128) == 0.25  # 128 regs × 256 threads = 32 Ki: two blocks
    assert occupancy(block256, rtx, 32) == 1.0 and rtx.max_warps_per_sm == 48
    big_shared = LaunchGeometry((1, 1, 1), (128, 1, 1), 100 * 1024)
    assert occupancy(big_shared, a100, 32) == 4 / 64  # one block of 4 warps fits in 164 KiB
    assert occupancy(LaunchGeometry((1, 1, 1), (32, 1, 1), 0), a100, 16) == 0.5  # 32 blocks of one warp
