"""The GPU runner. Without a GPU (this machine): one clear message, from Python and the CLI. The
tests marked `cuda` need a real NVIDIA GPU and are deselected by default (`-m cuda` runs them)."""
import sys
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from autosched import te, zoo
from autosched.cli import main
from autosched.database import Database, best
from autosched.database.schedules import TunedSchedules
from autosched.measure import gpu_worker
from autosched.measure.cuda_driver import CudaError
from autosched.measure.emulate import EmulationBuilder
from autosched.measure.gpu import GpuRunner, GpuUnavailableError
from autosched.measure.interface import measure_with
from autosched.measure.local import LocalRunner, RunnerOptions
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import ErrorKind, MeasureInput, MeasureResult
from autosched.schedule import create_schedule
from autosched.space import ChoiceKnob, ConfigSpace
from autosched.target import Target
from autosched.templates import get_template
from autosched.tuner.api import tune_task
from tests.cuda_markers import needs_gpu, no_gpu_here
from tests.fake_cuda import H100, Device, FakeH100Runner, binding_modules
from tests.gpu_schedules import tiled_matmul
from tests.task_helpers import gemm_task


@no_gpu_here
def test_without_a_gpu_the_runner_refuses_once_and_says_what_to_do():
    with pytest.raises(GpuUnavailableError, match="--emulate checks CUDA kernels on the CPU"):
        GpuRunner()


@no_gpu_here
def test_cli_tune_for_cuda_without_a_gpu(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(zoo.mlp(), path)
    assert main(["tune", str(path), "--target", "cuda -arch=sm_80", "--trials", "2",
                 "--db", str(tmp_path / "tuning.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "--emulate" in err


@dataclass(frozen=True)
class MatmulTask:
    key: str = "mm_96x80x72"
    op: str = "test_gpu_runner"

    def random_inputs(self, seed: int):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal((96, 72), dtype=np.float32), rng.standard_normal((72, 80), dtype=np.float32)]

    def reference(self, inputs):
        return [inputs[0] @ inputs[1]]


SPACE = ConfigSpace("test_gpu_runner", [ChoiceKnob("kernel", ("tiled", "illegal_address"))])


def instantiate(inp: MeasureInput):
    if inp.config["kernel"] == "tiled":
        return tiled_matmul(96, 80, 72, block=(32, 16, 8), thread=(4, 2), vec=2)
    a, b = te.placeholder((96, 72), name="A"), te.placeholder((72, 80), name="B")
    c = te.compute((96, 80), lambda i, j: a[i * 50_000_000, j % 72] + b[0, j], name="C")  # far out of bounds
    s = create_schedule(c)
    s[c].bind(s[c].op.axes[0], "blockIdx.x")
    s[c].bind(s[c].op.axes[1], "threadIdx.x")
    return s, [a, b, c]


@pytest.mark.cuda
@needs_gpu
def test_gpu_runner_times_checked_kernels_and_survives_a_sticky_error(tmp_path):
    target = Target.parse("cuda")
    builder = NvccBuilder(n_parallel=2, cache_dir=tmp_path, instantiate=instantiate)
    good, bad = SPACE.get(0), SPACE.get(1)
    inputs = [MeasureInput(MatmulTask(), target, c) for c in (good, bad, good)]
    with GpuRunner(RunnerOptions(repeat=3, min_repeat_ms=5.0)) as runner:
        first, crashed, again = measure_with(builder, runner)(inputs)
        assert runner.device["compute_capability"]
    assert first.ok and len(first.costs) == 3, first.error_msg
    assert crashed.error_kind is ErrorKind.RUNTIME_ERROR and "CUDA_ERROR" in crashed.error_msg
    assert again.ok, again.error_msg  # a fresh worker, a fresh context
    assert runner.device["timing"] == ("cuda graph" if runner.device["bindings"] == "cuda-bindings" else "launch loop")
    # each launch after its own flush of twice the L2, timed between events recorded inside the graph
    with GpuRunner(RunnerOptions(repeat=3, min_repeat_ms=5.0, caches="flushed")) as runner:
        assert runner.flush_bytes() == 2 * runner.device["l2_bytes"] > 0
        (flushed,) = measure_with(builder, runner)(inputs[:1])
    assert flushed.ok and len(flushed.costs) == 3 and flushed.caches == "flushed", flushed.error_msg


REFUSED = (ErrorKind.INSTANTIATION_ERROR, ErrorKind.RESOURCE_LIMIT)  # a config the template or the device rules out


def assert_every_candidate_ran_right_or_was_refused(records, trials: int) -> None:
    """Each of the `trials` candidates either ran and matched the task's reference, or was ruled
    out before running; none crashed, hung or computed a wrong answer."""
    assert len(records) == trials
    for inp, res in records:
        assert res.ok or res.error_kind in REFUSED, (inp.config.to_json(), res.error_kind, res.error_msg)
    assert any(res.ok for _, res in records)


@pytest.mark.cuda
@needs_gpu
def test_tuning_a_gemm_on_the_gpu(tmp_path):
    task = gemm_task((64, 256), (128, 256), (128,), trans_b=1)
    with GpuRunner(RunnerOptions(repeat=3, min_repeat_ms=5.0)) as runner:
        result = tune_task(task, "cuda", 16, "random", runner=runner, builder=NvccBuilder(cache_dir=tmp_path))
    assert_every_candidate_ran_right_or_was_refused(result.records, 16)


def test_tuning_a_gemm_emulated(tmp_path):
    """The tune above on a machine without a GPU: each candidate checked by its CPU emulation."""
    task = gemm_task((64, 256), (128, 256), (128,), trans_b=1)
    with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.0, threads=1)) as runner:
        result = tune_task(task, "cuda -arch=sm_80", 8, "random", runner=runner,
                           builder=EmulationBuilder(n_parallel=2, cache_dir=tmp_path))
    assert_every_candidate_ran_right_or_was_refused(result.records, 8)


@pytest.mark.parametrize("bindings, why", [("cuda-bindings", "cuInit: CUDA_ERROR_NO_DEVICE"),
                                          ("pycuda", "cuInit: CUDA_ERROR_NO_DEVICE")])
def test_a_driver_without_a_device_is_one_clear_message(monkeypatch, bindings, why):
    """Both bindings' doubles on a machine whose GPU is missing (no GPU here: the driver is faked)."""
    for name, module in binding_modules(bindings, Device(present=False)).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setenv("AUTOSCHED_CUDA_BINDINGS", bindings)
    with pytest.raises(RuntimeError, match=rf"no usable NVIDIA GPU here \({why}\); --emulate"):
        gpu_worker.Gpu()


def test_records_name_the_gpu_model_the_worker_reads_from_the_driver(tmp_path):
    target = Target.parse("cuda -arch=sm_90")
    with FakeH100Runner() as runner:
        measured = runner.measured_target(target)
        assert {k: runner.device[k] for k in ("device", "compute_capability", "bindings")} == {
            "device": H100, "compute_capability": "9.0", "bindings": "cuda-bindings"}
    assert measured.fingerprint == f"cuda|{H100}|sm_90" and measured.isa == target.isa == "cuda-sm_90"
    assert measured.gpu == H100 and target.gpu is None
    task = gemm_task((64, 256), (128, 256), (128,), trans_b=1)
    config = get_template(task.op, "cuda").space(task, measured).get(0)
    db = Database(tmp_path / "t.db")
    db.commit([(MeasureInput(task, measured, config), MeasureResult((1e-3,), ErrorKind.NO_ERROR, "", 0.1, 1.0))])
    [stored] = db.stored()
    assert stored.target.fingerprint == f"cuda|{H100}|sm_90"
    assert best(db, task, measured).fingerprint == measured.fingerprint
    assert best(db, task, target).fingerprint == measured.fingerprint  # a build without the GPU still finds it


def test_a_build_says_when_its_records_come_from_another_gpu_model(tmp_path, caplog):
    target = Target.parse("cuda -arch=sm_90")
    task = gemm_task((64, 256), (128, 256), (128,), trans_b=1)
    config = get_template(task.op, "cuda").space(task, target).get(0)
    db = Database(tmp_path / "t.db")
    db.commit([(MeasureInput(task, target.on_gpu(H100), config),
                MeasureResult((1e-3,), ErrorKind.NO_ERROR, "", 0.1, 1.0))])
    TunedSchedules(db)(task, target)  # a build that names no GPU: any sm_90 record fits, quietly
    assert not caplog.text
    TunedSchedules(db)(task, target.on_gpu("NVIDIA H200"))
    assert f"records measured on another GPU of the same ISA ({H100}, this is NVIDIA H200)" in caplog.text


def test_sticky_errors_are_the_ones_that_lose_the_context():
    assert CudaError("CUDA_ERROR_ILLEGAL_ADDRESS", "cuStreamSynchronize").sticky
    assert not CudaError("CUDA_ERROR_OUT_OF_MEMORY", "cuMemAlloc").sticky
