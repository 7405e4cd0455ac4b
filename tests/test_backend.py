"""Back ends: one record per target kind, and the Python API measuring through it as the CLI does."""
import json
from pathlib import Path

import pytest

import autosched
from autosched.api import model_tasks
from autosched.backend import CPU, CUDA, CUDA_EMULATION, backend_for
from autosched.database import Database
from autosched.errors import AutoschedError
from autosched.measure.emulate import EMULATION_RUNNER, EmulationBuilder
from autosched.measure.gpu import GpuRunner, GpuUnavailableError
from autosched.measure.interface import Runner
from autosched.measure.local import LocalBuilder, LocalRunner
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import ErrorKind, MeasureResult
from autosched.target import Target
from tests.cuda_markers import needs_nvcc, no_gpu_here
from tests.task_helpers import gemm_task

SM80 = "cuda -arch=sm_80"
#: what a CUDA candidate may fail with before it runs: a config over the arch's limits, or one
#: the template cannot instantiate
BUILD_FAILURES = {ErrorKind.RESOURCE_LIMIT, ErrorKind.INSTANTIATION_ERROR}


def test_each_target_kind_has_one_back_end_and_emulate_needs_a_cuda_target():
    sm80, host = Target.parse(SM80), Target.parse("llvm")
    assert backend_for("llvm") is CPU and backend_for(sm80) is CUDA
    assert backend_for(sm80, emulate=True) is CUDA_EMULATION
    assert (CPU.builder, CPU.runner, CPU.compiler) == (LocalBuilder, LocalRunner, "gcc")
    assert (CUDA.builder, CUDA.runner, CUDA.compiler) == (NvccBuilder, GpuRunner, "nvcc")
    assert (CUDA_EMULATION.builder, CUDA_EMULATION.runner, CUDA_EMULATION.compiler) == (EmulationBuilder, LocalRunner,
                                                                                           "gcc")
    assert CUDA_EMULATION.runner_options == EMULATION_RUNNER and CUDA_EMULATION.emulated and not CUDA.emulated
    # the emulation is a program for this CPU: built and timed where the host's own kernels are
    assert CUDA_EMULATION.binary_target(sm80).fingerprint == host.fingerprint
    assert CUDA_EMULATION.device(sm80) == CPU.device(host) and CUDA_EMULATION.toolchain(sm80) == CPU.toolchain(host)
    assert (CUDA.device(sm80), CUDA.toolchain(sm80), CUDA.gpus) == ("autosched-gpu-sm_80", "autosched-nvcc", 1)
    with pytest.raises(AutoschedError, match="--emulate runs CUDA kernels on the CPU; target llvm.* not a cuda target"):
        backend_for("llvm", emulate=True)
    with pytest.raises(AutoschedError, match="not a cuda target"):
        autosched.tune_task(gemm_task((8, 16), (16, 8), None), "llvm", 4, emulate=True)


def test_python_tune_with_emulate_records_candidates_checked_in_the_emulation(small_model, tmp_path):
    db = tmp_path / "tune.db"
    out = autosched.tune(small_model, SM80, trials=16, db=db, tuner="random", round_trials=8, emulate=True)
    assert out.summary.trials == 16
    assert out.model_check is None  # the emulation times nothing: no model to check (a GPU tune checks it)
    database = Database(db)
    try:
        stored = list(database.stored())
    finally:
        database.close()
    keys = {t.key for t in model_tasks(small_model, SM80)[1]}
    assert len(stored) == 16 and {s.key for s in stored} <= keys
    # the emulated cuda target's records: neither the CPU's nor a GPU's
    assert {s.target.fingerprint for s in stored} == {"cuda-emulated|sm_80"}
    ok = [s.result for s in stored if s.result.ok]
    assert ok, [s.result.error_msg for s in stored]
    # checked against the task's reference by the CPU worker, costed once by the static model
    assert all(len(r.costs) == EMULATION_RUNNER.repeat == 1 for r in ok)
    assert {s.result.error_kind for s in stored if not s.result.ok} <= BUILD_FAILURES


def test_python_tune_task_with_emulate_checks_cuda_candidates_on_the_cpu():
    task = gemm_task((32, 64), (64, 48), (48,))
    result = autosched.tune_task(task, SM80, 16, "random", emulate=True)
    assert len(result.records) == 16 and result.best is not None
    assert all(inp.target.kind == "cuda" for inp, _ in result.records)
    assert all(len(res.costs) == EMULATION_RUNNER.repeat for _, res in result.records if res.ok)
    assert {res.error_kind for _, res in result.records if not res.ok} <= BUILD_FAILURES


@no_gpu_here
def test_python_tune_task_for_cuda_without_emulate_asks_for_the_gpu():
    with pytest.raises(GpuUnavailableError, match="--emulate checks CUDA kernels on the CPU"):
        autosched.tune_task(gemm_task((32, 64), (64, 48), (48,)), SM80, 4, "random")


class ManifestReader(Runner):
    """Notes what each built candidate is (its manifest's binary kind) and fails it."""

    def __init__(self):
        self.binaries: list[str] = []

    def run(self, inputs, builds):
        for b in builds:
            if b.ok:
                self.binaries += [k for k in ("cubin", "lib") if k in json.loads(Path(b.artifact).read_text())]
        return [MeasureResult.failure(ErrorKind.RUNTIME_ERROR, "not run", b.build_s, 0.0) for b in builds]


@needs_nvcc
def test_python_tune_task_for_cuda_builds_with_nvcc(tmp_path):
    runner = ManifestReader()
    autosched.tune_task(gemm_task((32, 64), (64, 48), (48,)), SM80, 2, "random", runner=runner)
    assert runner.binaries and set(runner.binaries) == {"cubin"}  # nvcc's cubins, not gcc's libraries
