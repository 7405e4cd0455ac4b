"""CUDA code generation, checked structurally here (no GPU: nvcc compiles it in test_nvcc.py)."""
import pytest

from autosched import te
from autosched.backend import renderer_for
from autosched.codegen import CodegenError
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.gpu import LimitError, check_limits, plan_kernel
from autosched.lower import lower
from autosched.lower.ir import Allocate, Barrier, Buffer, For, ForKind, PrimFunc, Store, seq
from autosched.schedule import ScheduleError, create_schedule
from autosched.target import gpu_capabilities
from autosched.te.expr import Const, Var
from tests.gpu_schedules import tiled_matmul


def _matmul_func(m=64, n=64, k=64, **kw):
    s, args = tiled_matmul(m, n, k, **kw)
    return lower(s, args, "mm")


def test_matmul_kernel_structure():
    func = _matmul_func()
    code = renderer_for("cuda").render(func)
    assert 'extern "C" __global__ void __launch_bounds__(64) mm(' in code
    assert "const float* __restrict__ A" in code and "float* __restrict__ C" in code
    for axis in ("blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"):
        assert f"(int32_t){axis}" in code
    assert "extern __shared__ __align__(16) unsigned char autosched_smem[];" in code
    assert "float* A_shared = (float*)(autosched_smem + 0);" in code
    assert "float* B_shared = (float*)(autosched_smem + 1024);" in code
    assert code.count("__syncthreads();") == 4
    assert "__align__(16) float C_local[16];" in code
    assert "*(float4*)&C[" in code and "*(const float4*)&B[" in code
    assert "#pragma unroll" in code
    geometry = CudaRenderer().geometry(func)
    assert geometry.grid == (2, 2, 1) and geometry.block == (8, 8, 1) and geometry.shared_bytes == 2048


def test_double_buffered_tiles_alternate_and_wait_once_per_step():
    s, args = tiled_matmul(64, 64, 64, double_buffer=True)
    func = lower(s, args, "mm")
    code = renderer_for("cuda").render(func)
    assert code.count("__syncthreads();") == 2  # after each copy, none before
    assert "((k_o % 2) * 256)" in code
    assert CudaRenderer().geometry(func).shared_bytes == 2 * 2048


def test_double_buffering_is_for_shared_tiles():
    s, args = tiled_matmul(64, 64, 64)
    with pytest.raises(ScheduleError, match="C_local: only a shared-memory stage can be double buffered"):
        next(st for st in s.stages if st.scope == "local").double_buffered()


def test_unaligned_vector_loop_stays_scalar():
    # n = 30: a row of C starts at a multiple of 30, never provably 16-byte aligned
    code = renderer_for("cuda").render(_matmul_func(64, 30, 64))
    assert "*(float4*)&C[" not in code


def test_schedule_binding_nothing_is_refused():
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(CodegenError, match="y_kernel: the schedule binds no loop to blockIdx/threadIdx"):
        renderer_for("cuda").render(lower(create_schedule(y), [x, y], "y_kernel"))


def test_too_many_threads_is_a_limit_error():
    x = te.placeholder((4096,), name="x")
    y = te.compute((4096,), lambda i: x[i] * 2.0, name="y")
    s = create_schedule(y)
    bx, tx = s[y].split(s[y].op.axes[0], 2048)
    s[y].bind(bx, "blockIdx.x")
    s[y].bind(tx, "threadIdx.x")
    with pytest.raises(LimitError, match="big: 2048 along threadIdx.x exceeds the limit of 1024"):
        renderer_for("cuda").render(lower(s, [x, y], "big"))


def test_device_limits_on_shared_memory_and_registers():
    geometry = plan_kernel(_matmul_func(256, 256, 256, block=(128, 128, 64), thread=(8, 8))).geometry
    assert geometry.shared_bytes == 2 * 128 * 64 * 4
    check_limits("mm", geometry, gpu_capabilities("sm_90"))  # 64 KiB: over 48 KiB static, within opt-in
    with pytest.raises(LimitError, match="73728 bytes of shared memory exceed sm_75.s 65536 per block"):
        check_limits("mm", plan_kernel(_matmul_func(256, 256, 256, block=(128, 128, 72), thread=(8, 8))).geometry,
                     gpu_capabilities("sm_75"))
    with pytest.raises(LimitError, match="128 registers × 1024 threads exceed the 65536 registers"):
        check_limits("mm", geometry.__class__((1, 1, 1), (32, 32, 1), 0), gpu_capabilities("sm_80"), registers=128)


def test_barrier_under_a_thread_guard_is_refused():
    # two stages bind threadIdx.x to 64 and 32 threads: the second runs under `tx < 32`
    buf = Buffer("s", "float32", (64,), "shared")
    out = Buffer("out", "float32", (64,))
    t1, t2 = Var("t1"), Var("t2")
    body = Allocate(buf, seq(
        For(t1, 64, ForKind.THREAD, Store(out, t1, Const(0.0, "float32")), "threadIdx.x"),
        For(t2, 32, ForKind.THREAD, seq(Barrier(), Store(buf, t2, Const(1.0, "float32"))), "threadIdx.x")))
    with pytest.raises(CodegenError, match="guarded: a barrier .* under thread-divergent control flow .*t2 < 32"):
        renderer_for("cuda").render(PrimFunc("guarded", [out], body))


def test_parallel_loop_is_refused():
    x = te.placeholder((64,), name="x")
    y = te.compute((64,), lambda i: x[i] * 2.0, name="y")
    s = create_schedule(y)
    o, i = s[y].split(s[y].op.axes[0], 32)
    s[y].parallel(o)
    s[y].bind(i, "threadIdx.x")
    with pytest.raises(CodegenError, match="parallel .*bind it to blockIdx"):
        renderer_for("cuda").render(lower(s, [x, y], "par"))
