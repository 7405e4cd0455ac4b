"""The CUDA emulation: generated GPU kernels run on the CPU with CUDA semantics (the GPU is the
only thing replaced: lowering, code generation and checks are the real ones)."""
from dataclasses import dataclass

import numpy as np
import pytest

from autosched.compile.emulation import build_emulated_kernel, emulated_kernel
from autosched.lower.ir import Allocate, Barrier, Buffer, For, ForKind, IfThenElse, PrimFunc, Store, seq
from autosched.measure.emulate import EmulationBuilder
from autosched.measure.interface import measure_with
from autosched.measure.local import LocalRunner, RunnerOptions
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.runtime.module import KernelError
from autosched.space import ChoiceKnob, ConfigSpace
from autosched.target import Target
from autosched.te.expr import Cmp, Const, Load, Var
from tests.gpu_schedules import tiled_matmul


@pytest.mark.parametrize("m, n, k, block, thread, vec, double_buffer", [
    (64, 64, 64, (32, 32, 8), (4, 4), 4, False),
    (67, 45, 33, (32, 16, 8), (4, 2), 2, False),     # odd sizes: edge tiles in m, n and k
    (17, 130, 9, (16, 64, 4), (2, 8), 4, True),
    (5, 3, 70, (8, 8, 16), (1, 1), 1, True),
    (64, 64, 64, (32, 32, 8), (4, 4), 4, True),
])
def test_tiled_matmul_matches_numpy(m, n, k, block, thread, vec, double_buffer):
    s, args = tiled_matmul(m, n, k, block=block, thread=thread, vec=vec, double_buffer=double_buffer)
    kern = build_emulated_kernel(s, args, "mm")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    kern(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


X = Buffer("x", "float32", (64,))
OUT = Buffer("out", "float32", (64,))


def test_out_of_bounds_shared_access_is_reported():
    sh = Buffer("tile", "float32", (32,), "shared")
    t = Var("t")
    body = Allocate(sh, For(t, 64, ForKind.THREAD, seq(Store(sh, t, Load(X, (t,), "float32")),
                                                 Store(OUT, t, Const(0.0, "float32"))), "threadIdx.x"))
    kern = emulated_kernel(PrimFunc("oob", [X, OUT], body))
    with pytest.raises(KernelError, match=r"oob: block \(0, 0, 0\) thread \(32, 0, 0\): tile\[32\] is out of bounds "
                                          r"\(size 32\)"):
        kern(np.zeros(64, np.float32), np.zeros(64, np.float32))


def test_barrier_only_some_threads_reach_is_reported():
    # the condition reads a per-thread register, so no static check sees that it diverges
    reg = Buffer("reg", "float32", (1,), "local")
    t = Var("t")
    zero = Const(0, "int32")
    body = For(t, 64, ForKind.THREAD, Allocate(reg, seq(
        Store(reg, zero, Load(X, (t,), "float32")),
        IfThenElse(Cmp("lt", Load(reg, (zero,), "float32"), Const(32.0, "float32")), Barrier()),
        Store(OUT, t, Load(reg, (zero,), "float32")))), "threadIdx.x")
    kern = emulated_kernel(PrimFunc("diverge", [X, OUT], body))
    with pytest.raises(KernelError, match="diverge: .*barrier 1 reached by only 32 threads.*thread-divergent"):
        kern(np.arange(64, dtype=np.float32), np.zeros(64, np.float32))
    uniform = np.zeros(64, np.float32)
    kern(uniform, np.ones(64, np.float32))  # every thread reaches it: fine


@pytest.mark.parametrize("with_barrier", [True, False])
def test_threads_run_in_lockstep_between_barriers(with_barrier):
    # out[t] = x[63 - t] through shared memory: correct only with a barrier between write and read
    sh = Buffer("tile", "float32", (64,), "shared")
    t = Var("t")
    rev = Const(63, "int32") - t
    body = Allocate(sh, For(t, 64, ForKind.THREAD, seq(
        Store(sh, t, Load(X, (t,), "float32")), Barrier() if with_barrier else None,
        Store(OUT, t, Load(sh, (rev,), "float32"))), "threadIdx.x"))
    kern = emulated_kernel(PrimFunc("reverse", [X, OUT], body))
    x, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    kern(x, out)
    if with_barrier:
        np.testing.assert_array_equal(out, x[::-1])
    else:  # shared memory starts as NaN: early threads read what later ones have not written yet
        assert np.isnan(out[:32]).all()


@dataclass(frozen=True)
class SmallMatmul:
    key: str = "mm_40x24x20"
    op: str = "test_emulated_matmul"

    def random_inputs(self, seed: int):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal((40, 20), dtype=np.float32), rng.standard_normal((20, 24), dtype=np.float32)]

    def reference(self, inputs):
        return [inputs[0] @ inputs[1]]


SPACE = ConfigSpace("test_emulated_matmul", [ChoiceKnob("tile", ("good", "huge_shared"))])


def instantiate(inp: MeasureInput):
    what = inp.config["tile"]
    if what == "huge_shared":
        return tiled_matmul(40, 24, 20000, block=(32, 32, 8000), thread=(4, 4))
    return tiled_matmul(40, 24, 20, block=(16, 8, 4), thread=(2, 2), vec=2)


def test_emulation_builder_and_local_runner_check_candidates(tmp_path):
    builder = EmulationBuilder(n_parallel=2, timeout=60, cache_dir=tmp_path, instantiate=instantiate)
    target = Target.parse("cuda -arch=sm_80")
    inputs = [MeasureInput(SmallMatmul(), target, SPACE.get(i)) for i in range(2)]
    with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=1.0, threads=1)) as runner:
        good, huge = measure_with(builder, runner)(inputs)
    assert good.ok, good.error_msg  # checked against the task's reference by the runner's worker
    assert huge.error_kind is ErrorKind.RESOURCE_LIMIT and "shared memory exceed sm_80" in huge.error_msg
