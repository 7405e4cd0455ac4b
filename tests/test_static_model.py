"""The static model of a GPU kernel, and emulated tunes: their records are static estimates
under the emulated target, never GPU timings (no GPU here: nvcc, its SASS and the emulation)."""
import json

import pytest

from autosched.api import tune
from autosched.cli import main
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.gpu import plan_kernel
from autosched.codegen.nvcc import compile_cuda
from autosched.codegen.sass import kernel_sass
from autosched.database import Database, best
from autosched.database.identity import is_emulated
from autosched.database.queries import history
from autosched.errors import AutoschedError
from autosched.lower import lower
from autosched.measure.emulate import EmulationBuilder
from autosched.measure.gpu_build import lower_for_gpu
from autosched.measure.local import RunnerOptions, instantiate_from_template
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import ErrorKind, MeasureInput, MeasureResult
from autosched.measure.static_model import Lanes, estimate, kernel_traffic
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.te.expr import Var
from autosched.templates import get_template
from tests.cuda_markers import ARCHS, needs_nvcc
from tests.fake_cuda import FakeH100Runner
from tests.gpu_schedules import tiled_matmul
from tests.task_helpers import matmul_task

SM80 = "cuda -arch=sm_80"


def test_traffic_of_a_tiled_matmul_counts_every_tile_load():
    n, bm, bn = 256, 64, 32
    s, args = tiled_matmul(n, n, n, block=(bm, bn, 8), thread=(4, 4), vec=4)
    t = kernel_traffic(lower(s, args, "mm"))
    assert t.flops == 2 * n ** 3
    # every block loads its rows of A and columns of B once per k step
    assert t.global_load_bytes == 4 * (n * n * (n // bn) + n * n * (n // bm))
    assert t.global_store_bytes == 4 * n * n and t.global_buffer_bytes == 3 * 4 * n * n
    assert t.shared_bytes > t.global_load_bytes  # each shared element is read by many threads


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_register_tiles_beat_one_output_per_thread(tmp_path, arch):
    caps = Target.parse(f"cuda -arch={arch}").gpu_capabilities
    figures = {}
    for name, block, thread in (("1x1", (16, 16, 8), (1, 1)), ("4x4", (64, 64, 8), (4, 4))):
        s, args = tiled_matmul(1024, 1024, 1024, block=block, thread=thread, vec=4)
        func = lower(s, args, "mm")
        built = compile_cuda(CudaRenderer().render(func), arch, cache_dir=tmp_path)
        figures[name] = estimate(func, plan_kernel(func).geometry, caps, built.usage["mm"],
                                 kernel_sass(built.path, "mm"))
    # a thread computing 16 outputs loads a quarter of the shared bytes per FMA and issues fewer instructions
    assert figures["4x4"].seconds < figures["1x1"].seconds
    assert figures["4x4"].instructions_per_flop < figures["1x1"].instructions_per_flop
    assert 1e-5 < figures["4x4"].seconds < 1e-2  # 2.1 GFLOP on an A100/H100: tens to hundreds of µs


def test_blocks_of_a_few_threads_pay_for_whole_warps():
    # on an H200, sampled configs with blocks of 1-16 threads ran 10-50x slower than a model that
    # counted only their threads said (benchmarks/gpu.py --parts correlation): a warp issues for 32
    caps = Target.parse(SM80).gpu_capabilities
    figures = {}
    for threads, block in ((2, (8, 4, 8)), (256, (64, 64, 8))):
        s, args = tiled_matmul(1024, 1024, 1024, block=block, thread=(4, 4), vec=4)
        func = lower(s, args, "mm")
        geometry = plan_kernel(func).geometry
        assert geometry.threads_per_block == threads
        figures[threads] = estimate(func, geometry, caps).seconds
    assert figures[2] > 8 * figures[256]


def test_tensor_core_work_is_counted_at_the_tensor_rate():
    target = Target.parse("cuda -arch=sm_90 -precision=tf32")
    task = matmul_task((4096, 4096), (4096, 4096))
    inp = MeasureInput(task, target, get_template(task.op, "cuda").fallback(task, target))
    func, geometry = lower_for_gpu(inp, instantiate_from_template)
    t = kernel_traffic(func)
    assert t.flops == 0 and t.mma_flops == 2 * 4096 ** 3  # every product on the tensor cores
    assert t.mma_lane_ops == t.mma_flops / (2 * 16 * 8 * 8) * 32  # m16n8k8: one instruction a lane
    figure = estimate(func, geometry, target.gpu_capabilities)
    # 137 GFLOP at an H100's dense TF32 rate (495 TFLOP/s) take 0.28 ms at least; the H200 ran it in 1.09
    assert figure.flops == 2 * 4096 ** 3 and 2.7e-4 < figure.seconds < 2e-3


def test_a_warps_shared_access_costs_its_bank_conflicts():
    lanes = Lanes((32, 1, 1))
    x = Var("tx", "int32")
    lanes.env[x] = lanes.threads["threadIdx.x"]
    assert lanes.wavefronts(x, 1) == 1  # 32 consecutive words: 32 banks
    assert lanes.wavefronts(x * 2, 1) == 2  # every other word: two lanes a bank
    assert lanes.wavefronts(x * 32, 1) == 32  # a column of a 32-word-wide tile: one bank
    assert lanes.wavefronts(x * 33, 1) == 1  # padded by a word
    assert lanes.wavefronts(x // 4, 1) == 1  # 8 words, each broadcast to 4 lanes
    assert lanes.wavefronts(x * 4, 4) == 1  # float4s side by side, 8 lanes a phase
    assert lanes.wavefronts(x * 8, 4) == 2
    assert lanes.wavefronts(x % 2 * 64, 1) == 2  # two distinct words in bank 0, each to 16 lanes


def test_an_unpadded_tensor_core_tile_pays_bank_conflicts():
    # on an H200 (48 sampled tf32 configs of the 1024³ MatMul) unpadded tiles ran 1.7x slower in the
    # median; the model that ignored bank conflicts ranked the configs at Spearman 0.15, with them 0.67
    target = Target.parse("cuda -arch=sm_90 -precision=tf32")
    task = matmul_task((1024, 1024), (1024, 1024))
    template = get_template(task.op, "cuda")
    space = template.space(task, target)
    knobs = {k.name: template.fallback(task, target)[k.name] for k in space.knobs}
    conflicts = {}
    for pad in (0, 1):
        func, geometry = lower_for_gpu(MeasureInput(task, target, space.from_values({**knobs, "pad": pad, "vec": 1})),
                                       instantiate_from_template)
        t = kernel_traffic(func, geometry.block)
        conflicts[pad] = t.shared_wavefront_bytes / t.shared_bytes
        assert kernel_traffic(func).shared_wavefront_bytes == t.shared_bytes  # without the block: none counted
    assert conflicts[1] == 1.0 and conflicts[0] > 2.0


def test_emulated_target_has_its_own_fingerprint_and_isa():
    target = Target.parse(SM80)
    emulated = target.as_emulated()
    assert emulated.fingerprint == "cuda-emulated|sm_80" and emulated.isa == "cuda-emulated-sm_80"
    assert str(emulated) == str(target) and target.isa == "cuda-sm_80"
    assert is_emulated(emulated.fingerprint) and is_emulated(target.fingerprint)  # the bare arch: older emulations
    assert not is_emulated(target.on_gpu("NVIDIA A100-SXM4-80GB").fingerprint)


def _result(cost: float) -> MeasureResult:
    return MeasureResult((cost,), ErrorKind.NO_ERROR, "", 0.1, 1.0)


def test_best_never_reads_emulated_costs_as_gpu_times(small_model, tmp_path):
    target = Target.parse(SM80)
    task = max(extract_tasks_of(small_model), key=lambda t: t.flops)
    space = get_template(task.op, "cuda").space(task, target)
    a, b, c = space.get(0), space.get(1), space.get(2)
    db = Database(tmp_path / "t.db")
    db.commit([(MeasureInput(task, target, a), _result(1e-7))])  # an older version's emulation run time
    assert best(db, task, target) is None and history(db, [task], target) == {}
    db.commit([(MeasureInput(task, target.as_emulated(), b), _result(2e-6))])  # a static estimate
    found = best(db, task, target)
    assert found.static_estimate and found.config == b and found.fingerprint == "cuda-emulated|sm_80"
    gpu = target.on_gpu("NVIDIA A100-SXM4-80GB")
    assert history(db, [task], gpu) == {}  # a GPU tune starts from nothing: it measures b for real
    db.commit([(MeasureInput(task, gpu, c), _result(5e-3))])  # slower than the estimate, but a timing
    for where in (target, gpu):
        found = best(db, task, where)
        assert not found.static_estimate and found.config == c and found.cost == 5e-3


def extract_tasks_of(path):
    from autosched.frontend.onnx import load_onnx
    from autosched.graph.passes import optimize
    return [t for t in extract_tasks(optimize(load_onnx(path))).tasks if t.op == "Gemm"]


@needs_nvcc
def test_an_emulated_tune_records_static_estimates(small_model, tmp_path, capsys):
    db_path = tmp_path / "t.db"
    assert main(["tune", str(small_model), "--target", SM80, "--emulate", "--trials", "4", "--round", "2",
                 "--tuner", "random", "--db", str(db_path), "--lines"]) == 0
    shown = capsys.readouterr().out
    assert "best static estimate" in shown and "static estimate of the tuned tasks" in shown  # never "best ms"
    assert "best ms" not in shown and "estimated latency" not in shown
    db = Database(db_path)
    stored = list(db.stored())
    assert {r.target.fingerprint for r in stored} == {"cuda-emulated|sm_80"}
    assert {r.target.isa for r in stored} == {"cuda-emulated-sm_80"}
    # each cost is the static model's estimate the build wrote for that config, not a time of the emulation
    builder = EmulationBuilder(n_parallel=1, cache_dir=tmp_path / "cache")
    tasks = {t.key: t for t in extract_tasks_of(small_model)}
    checked = 0
    for r in stored:
        if r.result.ok:
            target = Target.parse(SM80).as_emulated()
            task = tasks[r.key]
            config = get_template(task.op, "cuda").space(task, target).from_json(r.config)
            inp = MeasureInput(task, target, config)
            [built] = builder.build([inp])
            manifest = json.loads(open(built.artifact).read())
            assert r.result.costs == (manifest["static_estimate"]["seconds"],)
            checked += 1
    assert checked
    assert main(["db", "best", str(small_model), "--target", SM80, "--db", str(db_path)]) == 0
    printed = capsys.readouterr().out
    assert "static estimate" in printed and "from an emulated tune" in printed
    assert "estimated latency of the tuned tasks: 0 ms" in printed  # no estimate is added to measured times


@needs_nvcc
def test_a_gpu_tune_times_in_cold_caches_the_emulation_refuses(small_model, tmp_path, monkeypatch):
    """A tune on the GPU (the driver test double of an H100) in cold caches: records say so; the
    emulation, which times nothing, refuses any mode but warm with one message."""
    monkeypatch.setenv("FAKE_CUDA_BINDINGS", "cuda-bindings")
    db_path = tmp_path / "cold.db"
    with FakeH100Runner(RunnerOptions(flush_bytes=1 << 12)) as runner:  # the simulated memset is Python's: kept small
        assert runner.cache_bytes() == 50 << 20  # "auto" weighs the model's weights against the GPU's L2
        tune(small_model, "cuda -arch=sm_90", 2, db=db_path, tuner="random", round_trials=2, runner=runner,
             builder=NvccBuilder(n_parallel=1, cache_dir=tmp_path / "nvcc"), caches="cold")
    stored = list(Database(db_path).stored())
    assert stored and {r.result.caches for r in stored if r.result.ok} == {"cold"}, [r.result.error_msg for r in stored]
    with pytest.raises(AutoschedError, match="the CUDA emulation times nothing"):
        tune(small_model, "cuda -arch=sm_90", 2, db=db_path, tuner="random", emulate=True, caches="flushed")


@needs_nvcc
def test_a_gpu_tune_measures_what_an_emulated_tune_estimated(small_model, tmp_path, monkeypatch):
    """An emulated tune, then a tune on the GPU (a driver test double of an H100: no GPU here)
    of the same model into the same database: the GPU tune starts from no history, measures the
    same configs for real, and from then on best() ranks by its timings."""
    target = "cuda -arch=sm_90"
    db_path = tmp_path / "t.db"
    tune(small_model, target, 4, db=db_path, tuner="random", round_trials=2, emulate=True)
    monkeypatch.setenv("FAKE_CUDA_BINDINGS", "cuda-bindings")
    with FakeH100Runner() as runner:
        out = tune(small_model, target, 4, db=db_path, tuner="random", round_trials=2, runner=runner,
                   builder=NvccBuilder(n_parallel=1, cache_dir=tmp_path / "nvcc"))
    assert out.resumed == 0 and out.transferred == 0  # nothing emulated was resumed as if measured
    stored = list(Database(db_path).stored())
    emulated = {(r.key, json.dumps(r.config, sort_keys=True)) for r in stored if is_emulated(r.target.fingerprint)}
    timed = {(r.key, json.dumps(r.config, sort_keys=True)) for r in stored if "H100" in r.target.fingerprint}
    assert len(emulated) == 4 and timed == emulated  # the same configs, now timed
    db = Database(db_path)
    for task in extract_tasks_of(small_model):
        found = best(db, task, Target.parse(target))
        assert found is not None and not found.static_estimate and "H100" in found.fingerprint
