"""The GPU runner through either driver binding, cuda-bindings or pycuda, each on a test double
of the binding over one simulated H100 (tests/fake_cuda.py): there is no GPU on the machines
these tests run on, so the GPU is what is faked; the runner, its worker process and the driver
layer are the real ones. Also: pycuda built here but imported without a driver says so once."""
import importlib.util
import json
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from autosched.measure import gpu_worker
from autosched.measure.cuda_driver import NoDriver, open_driver
from autosched.measure.gpu import GpuRunner, GpuUnavailableError
from autosched.measure.local import RunnerOptions
from autosched.measure.record import BuildResult, ErrorKind, MeasureInput
from autosched.measure.worker import load_data
from autosched.space import ChoiceKnob, ConfigSpace
from autosched.target import Target
from tests.cuda_markers import no_gpu_here
from tests.fake_cuda import FLUSH_MS, H100, L2_BYTES, Device, FakeH100Runner, binding_modules, kernel_ms

BINDINGS = ("cuda-bindings", "pycuda")


@dataclass(frozen=True)
class AddTask:
    key: str = "add_4x8"
    op: str = "test_gpu_bindings"

    def random_inputs(self, seed: int):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((4, 8), dtype=np.float32)]

    def reference(self, inputs):
        return [inputs[0] + inputs[1]]


SPACE = ConfigSpace("test_gpu_bindings", [ChoiceKnob("kernel", ("add", "illegal_address"))])


def _manifest(tmp_path, symbol: str) -> BuildResult:
    """A built candidate as NvccBuilder writes it (the simulated GPU runs any cubin's bytes)."""
    cubin = tmp_path / f"{symbol}.cubin"
    cubin.write_bytes(b"\x7fELF fake cubin of " + symbol.encode())
    manifest = tmp_path / f"{symbol}.json"
    params = [{"name": n, "dtype": "float32", "shape": [4, 8]} for n in ("a", "b", "c")]
    manifest.write_text(json.dumps({"cubin": str(cubin), "symbol": symbol, "params": params,
                                    "geometry": {"grid": [1, 1, 1], "block": [32, 1, 1], "shared_bytes": 0}}))
    return BuildResult(str(manifest), ErrorKind.NO_ERROR, "", 0.1)


@pytest.mark.parametrize("bindings", BINDINGS)
def test_runner_measures_and_survives_a_sticky_error(tmp_path, monkeypatch, bindings):
    monkeypatch.setenv("FAKE_CUDA_BINDINGS", bindings)
    target = Target.parse("cuda -arch=sm_90")
    good, bad = _manifest(tmp_path, "add"), _manifest(tmp_path, "illegal_address")
    inputs = [MeasureInput(AddTask(), target, SPACE.get(i)) for i in (0, 1, 0)]
    with FakeH100Runner(RunnerOptions(repeat=3, min_repeat_ms=1.0)) as runner:
        assert runner.device == {"device": H100, "compute_capability": "9.0", "bindings": bindings,
                                 "l2_bytes": L2_BYTES,
                                 "timing": "cuda graph" if bindings == "cuda-bindings" else "launch loop"}
        assert runner.measured_target(target).fingerprint == f"cuda|{H100}|sm_90"
        first, crashed, again = runner.run(inputs, [good, bad, good])
    assert first.ok and len(first.costs) == 3 and all(c > 0 for c in first.costs), first.error_msg
    assert crashed.error_kind is ErrorKind.RUNTIME_ERROR
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in crashed.error_msg and "the GPU worker restarts" in crashed.error_msg
    assert again.ok, again.error_msg  # a fresh worker, a fresh context


@pytest.mark.parametrize("bindings", BINDINGS)
def test_a_missing_binding_is_one_clear_message(monkeypatch, bindings):
    monkeypatch.setenv("AUTOSCHED_CUDA_BINDINGS", bindings)
    monkeypatch.setattr("autosched.measure.cuda_driver._import",
                        lambda name: (_ for _ in ()).throw(ImportError(f"No module named {name!r}")))
    with pytest.raises(NoDriver, match=r"needs cuda-bindings \(pip install 'autosched\[cuda\]'\) or pycuda "
                                       r"\(pip install 'autosched\[pycuda\]'"):
        open_driver()


def test_an_unknown_binding_is_refused(monkeypatch):
    monkeypatch.setenv("AUTOSCHED_CUDA_BINDINGS", "pyopencl")
    with pytest.raises(NoDriver, match="expected one of cuda-bindings, pycuda"):
        open_driver()


@no_gpu_here
@pytest.mark.skipif(importlib.util.find_spec("pycuda") is None, reason="pycuda is not installed (see the README)")
def test_pycuda_without_a_driver_is_one_clear_message(monkeypatch):
    """The real pycuda, built here against the toolkit, imported where no driver exists."""
    with pytest.raises(NoDriver, match=r"pycuda is installed but the NVIDIA driver \(libcuda.so.1\) is not"):
        open_driver("pycuda")
    monkeypatch.setenv("AUTOSCHED_CUDA_BINDINGS", "pycuda")
    with pytest.raises(GpuUnavailableError, match="pycuda is installed but the NVIDIA driver .*--emulate"):
        GpuRunner()


def _handle_in_process(tmp_path, monkeypatch, bindings: str, flush_bytes: int, repeat: int = 4,
                       weights: list[int] | None = None):
    """One request handled by the real worker code in this process, on a fresh simulated H100."""
    device = Device()
    for name, module in binding_modules(bindings, device).items():
        monkeypatch.setitem(sys.modules, name, module)
    gpu = gpu_worker.Gpu(open_driver(bindings))
    build = _manifest(tmp_path, "add")
    inputs = AddTask().random_inputs(0)
    data = tmp_path / "task.npz"
    np.savez(data, n_inputs=2, n_outputs=1, in0=inputs[0], in1=inputs[1], out0=AddTask().reference(inputs)[0])
    device.expected = load_data(str(data))[1]
    req = {"manifest": build.artifact, "data": str(data), "repeat": repeat, "min_repeat_ms": 1.0,
           "flush_bytes": flush_bytes, "weights": weights, "stop_above": 0.0, "rtol": 1e-5, "atol": 1e-6}
    return gpu_worker.handle(gpu, req), device, gpu.driver, kernel_ms((tmp_path / "add.cubin").read_bytes())


def test_repeats_replay_one_captured_graph(tmp_path, monkeypatch):
    """cuda-bindings: the timed launches are captured once and each repeat replays the graph, so a
    repeat's launches run back to back, with no Python between them."""
    reply, device, driver, ms = _handle_in_process(tmp_path, monkeypatch, "cuda-bindings", flush_bytes=0)
    assert reply["costs"] == pytest.approx([ms / 1e3] * 4, rel=1e-9)
    graph_launches = driver.cu.graph_launches
    assert graph_launches >= 1 + 4  # a warm-up replay that sizes the repeats, then one or more per repeat
    assert not driver.capturing and not driver.cu.graphs  # the graph is freed with its candidate


@pytest.mark.parametrize("bindings", BINDINGS)
def test_each_launch_follows_a_flush_the_time_excludes(tmp_path, monkeypatch, bindings):
    """Flushed: every timed launch follows its own L2 flush, and the events around the launch
    leave the flush's time out (a flush lasts FLUSH_MS on the simulated GPU, far more than the kernel)."""
    reply, device, driver, ms = _handle_in_process(tmp_path, monkeypatch, bindings, flush_bytes=1 << 10)
    assert ms < FLUSH_MS
    assert reply["costs"] == pytest.approx([ms / 1e3] * 4, rel=1e-9)
    if bindings == "cuda-bindings":
        assert driver.cu.graph_launches == 4 and not driver.cu.events  # one replay a repeat; no event left behind
    assert not device.copied  # flushed: nothing read back


@pytest.mark.parametrize("bindings", BINDINGS)
def test_cold_caches_read_the_activations_back_after_each_flush(tmp_path, monkeypatch, bindings):
    """Cold: after each flush the inputs that are not weights (here input 0; input 1 is the
    weight) are read back into the L2 by a device copy, outside the timed events."""
    reply, device, driver, ms = _handle_in_process(tmp_path, monkeypatch, bindings, flush_bytes=1 << 10, weights=[1])
    assert reply["costs"] == pytest.approx([ms / 1e3] * 4, rel=1e-9)
    assert device.copied and {n for _, n in device.copied} == {4 * 8 * 4}  # the 4 × 8 float32 activation
    assert len({src for src, _ in device.copied}) == 1


def test_the_gpu_runner_flushes_twice_the_gpus_l2(monkeypatch):
    """Not the host's last-level cache: the flush must overwrite the GPU's L2."""
    with FakeH100Runner(RunnerOptions(caches="flushed")) as runner:
        assert runner.flush_bytes() == 2 * L2_BYTES
    with FakeH100Runner(RunnerOptions(caches="flushed", flush_bytes=4096)) as runner:
        assert runner.flush_bytes() == 4096
    with FakeH100Runner(RunnerOptions()) as runner:
        assert runner.flush_bytes() == 0
