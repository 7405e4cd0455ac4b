"""One command for a machine with an NVIDIA GPU: everything autosched's CUDA side can be measured
against, in one run.

    python benchmarks/gpu.py [--json] [--quick] [--trials 300] [--arch sm_90] [--precision tf32]
                             [--parts tests,kernels,checks,correlation,models] [--out FILE]

1. tests: the `cuda`-marked tests (`pytest -m cuda`): passed, failed (by name), skipped;
2. kernels: the fallback kernel of GEMM 4096³ and of the BERT-base (sequence 128) GEMMs and
   ResNet-18 convolutions, timed by the GPU runner (CUDA events, checked against numpy) against
   cuBLAS / cuDNN through PyTorch or CuPy (whichever imports; FP32 with TF32 off, TF32 under
   `--precision tf32`, fp16/bf16 tensors under `--precision fp16/bf16`), with the ratio autosched / library (below 1 is faster) and the static
   model's estimate beside the measured time;
3. checks: every zoo model (or those `--models` names, `beside` for the blocks beside the zoo)
   built for the GPU and compared with onnxruntime (`autosched check`) at fp32 and on tensor cores
   at tf32, fp16 and bf16, each in its own process;
4. correlation: the static model's estimate against the GPU time over sampled configs of the
   kernels `--correlate` names (default the 1024³ MatMul), Spearman and each config's pair;
5. models: each zoo model built untuned and after a tune of `--trials` trials (a database in a
   temporary directory), run through its built library, against a reference: onnxruntime's CUDA
   execution provider (onnxruntime-gpu); where only onnxruntime's CPU build is installed,
   torchvision's model in PyTorch on the GPU for ResNet-18 and MobileNetV2, else onnxruntime on
   the CPU, named in `reference`.

On a machine without a GPU it says so in one line and does only what needs nvcc: it builds every
kernel of part 2 and reports its registers, occupancy, SASS mix and static estimate (no times).
`--json` prints one object: `gpu` (the device, or null), `arch`, `tests` (null without a GPU),
`kernels` (per shape: `flops`, `static_us`, `registers`, `occupancy`, `sass`, and with a GPU
`autosched_ms`, `runner_timing`, `pipelined_ms` (fp32 on sm_80+, where the fallback has no
pipeline: it with a 3-stage cp.async pipeline), `split_ms` (GEMMs and convolutions that split-K splits: the
sum of the parts' product and their reduction, as a build runs them), `library_ms`, `library`, `library_timing`, `ratio`), `checks` (per model/precision: `ok`,
`max_rel_err`), `static_model` (per kernel: `kernel`, `precision`, `spearman`, `configs` as
[index in the space, estimate s, GPU s]), `static_model_spearman` (the first kernel's) and `models`
(per model: `reference`, `reference_ms`, `untuned_ms`, `tuned_ms`, `untuned_ratio`, `tuned_ratio`);
the parts not run are empty. `--out FILE` writes the object after each part, so that a run cut
short keeps what it measured. `--quick`: GEMM 1024³ and one convolution, one model (the MLP), 16
trials, 8 configs for the correlation.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autosched import zoo  # noqa: E402
from autosched.api import build, tune  # noqa: E402
from autosched.codegen.sass import sass_available  # noqa: E402
from autosched.frontend.onnx import load_onnx  # noqa: E402
from autosched.graph.passes import optimize  # noqa: E402
from autosched.measure.emulate import static_estimate  # noqa: E402
from autosched.measure.gpu_build import lower_for_gpu  # noqa: E402
from autosched.measure.interface import measure_with  # noqa: E402
from autosched.measure.local import RunnerOptions, instantiate_from_template  # noqa: E402
from autosched.measure.nvcc import NvccBuilder, inspect_build  # noqa: E402
from autosched.measure.record import MeasureInput  # noqa: E402
from autosched.target import DEFAULT_CUDA_ARCH, Target, detect_cuda_arch  # noqa: E402
from autosched.task import Task, extract_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402
from cost_models.metrics import spearman  # noqa: E402

#: name -> (M, K, N) of C = A·B: GEMM 4096³ and BERT-base's GEMMs at sequence length 128
GEMMS = {"gemm_4096": (4096, 4096, 4096), "bert_qkv": (128, 768, 2304), "bert_attn_out": (128, 768, 768),
         "bert_ffn_up": (128, 768, 3072), "bert_ffn_down": (128, 3072, 768), "gemm_1024": (1024, 1024, 1024)}
#: name -> (channels in, channels out, height = width, kernel, stride): ResNet-18's convolutions, batch 1
CONVS = {"resnet_conv1": (3, 64, 224, 7, 2), "resnet_64_3x3": (64, 64, 56, 3, 1), "resnet_128_3x3": (128, 128, 28, 3, 1),
         "resnet_256_3x3": (256, 256, 14, 3, 1), "resnet_512_3x3": (512, 512, 7, 3, 1),
         "resnet_down_1x1": (64, 128, 56, 1, 2)}
QUICK_KERNELS = ("gemm_1024", "resnet_64_3x3")
MODELS = ("mlp", "resnet18", "mobilenet_v2", "bert_layer")


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _gemm_model(m: int, k: int, n: int, path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, n)).astype(np.float32), "w")
    return _save(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "gemm",
                                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]), path)


def _conv_model(c: int, o: int, hw: int, k: int, stride: int, path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((o, c, k, k)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
    return _save(helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, c, hw, hw])],
                                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]), path)


def _task(path: Path) -> Task:
    return max(extract_tasks(optimize(load_onnx(path))).tasks, key=lambda t: t.flops)


class Library:
    """cuBLAS and cuDNN through PyTorch, else CuPy (cuBLAS only), in the precision the target asks:
    FP32 without TF32 (autosched's default), with TF32 tensor cores under -precision=tf32, on
    fp16 or bf16 tensors with fp32 accumulation under -precision=fp16/bf16 (PyTorch only). The
    library then reads 16-bit operands where autosched's kernels read fp32 ones and round them
    at the tensor cores: twice the bytes on autosched's side."""

    def __init__(self, precision: str = "fp32") -> None:
        self.name, self.torch, self.cupy, self.timing = None, None, None, None
        self.dtype: object = None
        try:
            import torch
            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
                torch.backends.cudnn.allow_tf32 = precision == "tf32"
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
                self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
                self.name, self.torch = f"torch {torch.__version__}", torch
                return
        except ImportError:
            pass
        try:
            import cupy
            if precision not in ("fp32", "tf32"):
                return  # CuPy's matmul accumulates fp16 in fp16: not the same computation
            self.name, self.cupy = f"cupy {cupy.__version__}", cupy
        except ImportError:
            pass

    def _time(self, fn, sync, event, repeat: int = 20) -> float:
        """Milliseconds a call, by events around `repeat` calls: replayed from one captured CUDA
        graph where PyTorch can capture them, since eager dispatch costs 10-20 µs a call and
        would time itself rather than a small kernel; else launched one by one (`self.timing`
        says which)."""
        for _ in range(3):
            fn()
        sync()
        run = None
        if self.torch:
            t = self.torch
            try:
                graph, side = t.cuda.CUDAGraph(), t.cuda.Stream()
                side.wait_stream(t.cuda.current_stream())
                with t.cuda.stream(side):
                    fn()
                t.cuda.current_stream().wait_stream(side)
                with t.cuda.graph(graph):
                    for _ in range(repeat):
                        fn()
                graph.replay()
                sync()
                run, self.timing = graph.replay, "cuda graph"
            except Exception as e:  # noqa: BLE001 - any capture failure: time the plain launches
                print(f"gpu: no CUDA graph capture ({type(e).__name__}: {e}); timing launches one by one",
                      file=sys.stderr)
        if run is None:
            def run() -> None:
                for _ in range(repeat):
                    fn()
            self.timing = "launch loop"
        start, end = event(), event()
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / repeat if self.torch else \
            self.cupy.cuda.get_elapsed_time(start, end) / repeat

    def gemm_ms(self, m: int, k: int, n: int) -> float | None:
        if self.torch:
            t = self.torch
            a, b = t.randn(m, k, device="cuda", dtype=self.dtype), t.randn(k, n, device="cuda", dtype=self.dtype)
            return self._time(lambda: a @ b, t.cuda.synchronize, lambda: t.cuda.Event(enable_timing=True))
        if self.cupy:
            cp = self.cupy
            a, b = cp.random.randn(m, k, dtype=cp.float32), cp.random.randn(k, n, dtype=cp.float32)
            return self._time(lambda: a @ b, cp.cuda.Device().synchronize, cp.cuda.Event)
        return None

    def conv_ms(self, c: int, o: int, hw: int, k: int, stride: int) -> float | None:
        if not self.torch:
            return None  # CuPy has no maintained cuDNN convolution
        t = self.torch
        x, w = t.randn(1, c, hw, hw, device="cuda", dtype=self.dtype), t.randn(o, c, k, k, device="cuda", dtype=self.dtype)
        conv = t.nn.functional.conv2d
        return self._time(lambda: conv(x, w, stride=stride, padding=k // 2), t.cuda.synchronize,
                          lambda: t.cuda.Event(enable_timing=True))


def kernels(target: Target, names: list[str], tmp: Path, gpu: bool) -> dict:
    """Each shape's fallback kernel: built by nvcc, inspected, estimated, and with a GPU timed."""
    library = Library(target.precision) if gpu else None
    out: dict = {}
    runner = None
    if gpu:
        from autosched.measure.gpu import GpuRunner
        runner = GpuRunner(RunnerOptions(repeat=5, min_repeat_ms=50.0))
    try:
        for name in names:
            shape = GEMMS.get(name) or CONVS[name]
            path = (_gemm_model if name in GEMMS else _conv_model)(*shape, tmp / f"{name}.onnx")
            task = _task(path)
            inp = MeasureInput(task, target, get_template(task.op, "cuda").fallback(task, target))
            [built] = NvccBuilder(n_parallel=1, cache_dir=tmp / "nvcc").build([inp])
            row: dict = {"shape": list(shape), "flops": task.flops}
            if not built.ok:
                out[name] = {**row, "error": built.error_msg.splitlines()[0]}
                continue
            func, geometry = lower_for_gpu(inp, instantiate_from_template)
            row["static_us"] = static_estimate(inp, func, geometry, str(tmp / "nvcc"), 120.0).seconds * 1e6
            if sass_available():
                seen = inspect_build(built.artifact, target.gpu_capabilities).summary()
                row.update(registers=seen["registers"], occupancy=seen["occupancy"],
                           sass={k: v for k, v in seen.items() if k not in ("registers", "occupancy")})
            if runner is not None and library is not None:
                [res] = runner.run([inp], [built])
                row["autosched_ms"] = res.cost * 1e3 if res.ok else None
                row["runner_timing"] = runner.device["timing"]
                if (split := _split_ms(path, target, runner, tmp)) is not None:
                    row["split_ms"] = split
                if (piped := _pipelined(inp)) is not None:  # the fallback through a 3-stage cp.async pipeline
                    [piped_built] = NvccBuilder(n_parallel=1, cache_dir=tmp / "nvcc").build([piped])
                    [piped_res] = runner.run([piped], [piped_built]) if piped_built.ok else [None]
                    row["pipelined_ms"] = piped_res.cost * 1e3 if piped_res is not None and piped_res.ok else None
                row["library"] = library.name
                row["library_ms"] = library.gemm_ms(*shape) if name in GEMMS else library.conv_ms(*shape)
                row["library_timing"] = library.timing
                if row["autosched_ms"] and row["library_ms"]:
                    row["ratio"] = row["autosched_ms"] / row["library_ms"]
            out[name] = row
    finally:
        if runner is not None:
            runner.close()
    return out


def _split_ms(path: Path, target: Target, runner, tmp: Path) -> float | None:
    """The GEMM or convolution as a CUDA build runs it, where split-K splits it
    (`graph/passes/split_k.py`): the fallback kernels of the product of the parts (a batched
    MatMul, a grouped Conv) and of their sum, each checked and timed, added up (milliseconds);
    None where it is not split or a kernel fails."""
    tasks = extract_tasks(optimize(load_onnx(path), None, target.gpu_blocks)).tasks
    if len(tasks) < 2:
        return None
    inputs = [MeasureInput(t, target, get_template(t.op, "cuda").fallback(t, target)) for t in tasks]
    results = runner.run(inputs, NvccBuilder(n_parallel=2, cache_dir=tmp / "nvcc").build(inputs))
    return sum(r.cost for r in results) * 1e3 if all(r.ok for r in results) else None


def _pipelined(inp: MeasureInput) -> MeasureInput | None:
    """The fp32 fallback with its shared tiles filled by a 3-stage cp.async pipeline (sm_80 and
    later), where the fallback has none: what the pipeline buys, timed beside it."""
    space = inp.config.space
    if "double_buffer" not in {k.name for k in space.knobs} or inp.config["double_buffer"] != 0 \
            or 3 not in space.knob("double_buffer").values:
        return None
    return MeasureInput(inp.task, inp.target, space.from_values({**{k.name: inp.config[k.name] for k in space.knobs}, "double_buffer": 3}))


def correlation(target: Target, kernel: str, n: int, tmp: Path) -> dict:
    """The static model against the GPU over `n` sampled configs of one kernel (configs that build
    and run): the Spearman correlation of estimate and time, and each config's pair (its index in
    the space, the estimate and the GPU time in seconds), so that the model can be studied offline
    (the estimate is reproducible without a GPU: nvcc and cuobjdump alone)."""
    from autosched.measure.gpu import GpuRunner
    shape = GEMMS.get(kernel) or CONVS[kernel]
    task = _task((_gemm_model if kernel in GEMMS else _conv_model)(*shape, tmp / f"{kernel}_corr.onnx"))
    space = get_template(task.op, "cuda").space(task, target)
    indices = space.sample(min(n, len(space)), np.random.default_rng(0))
    inputs = [MeasureInput(task, target, space.get(i)) for i in indices]
    with GpuRunner(RunnerOptions(repeat=3, min_repeat_ms=20.0)) as runner:
        results = measure_with(NvccBuilder(n_parallel=os.cpu_count() or 2, cache_dir=tmp / "corr"), runner)(inputs)
    configs = []
    for index, inp, res in zip(indices, inputs, results):
        if res.ok:
            func, geometry = lower_for_gpu(inp, instantiate_from_template)
            static_s = static_estimate(inp, func, geometry, str(tmp / "corr"), 120.0).seconds
            configs.append([int(index), static_s, res.cost])
    rho = float(spearman([c[1] for c in configs], [c[2] for c in configs])) if len(configs) > 2 else None
    return {"kernel": kernel, "precision": target.precision, "spearman": rho, "configs": configs}


def cuda_tests(log: Path | None) -> dict:
    """The cuda-marked tests, as `pytest -m cuda` reports them (the failed ones by name; the whole
    output written to `log` when given)."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rfE", "-p", "no:cacheprovider",
                           "tests"], cwd=ROOT, capture_output=True, text=True)
    if log is not None:
        log.write_text(proc.stdout + proc.stderr)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", proc.stdout)}
    return {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("errors", 0)
            + counts.get("error", 0), "skipped": counts.get("skipped", 0), "exit_status": proc.returncode,
            "failures": re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)}


def checks(arch: str, names: list[str], tmp: Path, out: dict, saved: Callable[[], None], timeout_s: float = 600.0,
           jobs: int = 4) -> dict:
    """Each zoo model built for the GPU and compared with onnxruntime by `autosched check`, at fp32
    and on tensor cores (tf32, fp16, bf16), each in its own process: a kernel that kills its context takes only
    its own check down. `jobs` checks run at once (their builds are nvcc on the host's cores; a lease
    is too short for sixteen in a row). Per model and precision, into `out` (`saved()` after each, so
    that a run cut short keeps the checks done): `ok`, and the check's worst relative error."""
    lock = threading.Lock()

    def check(name: str, precision: str) -> None:
        cmd = [sys.executable, "-m", "autosched.cli", "check", str(tmp / f"{name}.onnx"), "--target",
               f"cuda -arch={arch} -precision={precision}", "--no-shipped", "--db", str(tmp / f"checks_{name}_{precision}.db")]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            row: dict = {"ok": False, "error": f"no answer in {timeout_s:.0f} s"}
        else:
            rel = [float(v) for v in re.findall(r"^\S+\s+\S+\s+(\S+)\s+(?:ok|MISMATCH)$", proc.stdout, re.M)]
            row = {"ok": proc.returncode == 0, "max_rel_err": max(rel) if rel else None}
            if proc.returncode != 0:
                lines = (proc.stdout + proc.stderr).strip().splitlines()
                row["error"] = lines[-1] if lines else f"exit status {proc.returncode}"
        with lock:
            out[f"{name}/{precision}"] = row
            saved()

    zoo.save_zoo(tmp, names)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for future in [pool.submit(check, name, precision) for name in names
                       for precision in ("fp32", "tf32", "fp16", "bf16")]:
            future.result()
    return out


def _median_ms(run, feeds: dict, runs: int) -> float:
    """Median wall milliseconds of `run(feeds)` (a warm-up call first)."""
    run(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def _reference(name: str, path: Path) -> tuple[str, object] | None:
    """What a model is compared with: onnxruntime's CUDA execution provider (onnxruntime-gpu); where
    only the CPU build of onnxruntime is installed, torchvision's model of the same layout in PyTorch
    on the GPU (cuDNN, eager, TF32 off) for the CNNs, else onnxruntime on the CPU, named as such.
    The callable takes the feeds as host arrays and returns host arrays, as the built model does."""
    import onnxruntime as ort
    if "CUDAExecutionProvider" in ort.get_available_providers():
        session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
        return "onnxruntime CUDA", functools.partial(session.run, None)
    try:
        import torch
        import torchvision
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available() and name in ("resnet18", "mobilenet_v2"):
        torch.backends.cudnn.allow_tf32 = False
        net = getattr(torchvision.models, name)().eval().cuda()

        def run(feeds: dict) -> list:
            with torch.no_grad():
                return [net(torch.from_numpy(next(iter(feeds.values()))).cuda()).cpu().numpy()]
        return "torch cuDNN", run
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return f"onnxruntime CPU ({os.cpu_count()} cores)", functools.partial(session.run, None)


def models(target: Target, names: list[str], trials: int, tmp: Path, runs: int = 20) -> dict:
    """Each model untuned and tuned (built libraries, host arrays in and out) against a reference
    (`_reference`: onnxruntime's CUDA execution provider where installed), copies included on both
    sides."""
    from autosched.compile.evaluate import sample_inputs
    from autosched.runtime.model import load_model
    out: dict = {}
    for name in names:
        [path] = zoo.save_zoo(tmp, [name])
        feeds = sample_inputs(optimize(load_onnx(path)), 0)
        reference, run_reference = _reference(name, path)
        row = {"reference": reference, "reference_ms": _median_ms(run_reference, feeds, runs)}
        db = tmp / f"{name}.db"
        for label, tuned in (("untuned", False), ("tuned", True)):
            if tuned:
                tune(path, target, trials, db=db)
            lib = tmp / f"{name}_{label}.so"
            build(path, target, db=db, output=lib, shipped=False)
            model = load_model(lib)
            row[f"{label}_ms"] = _median_ms(model.run, feeds, runs)
            row[f"{label}_ratio"] = row[f"{label}_ms"] / row["reference_ms"]
            model.close()
        out[name] = row
    return out


PARTS = ("tests", "kernels", "checks", "correlation", "models")


def run(quick: bool, trials: int, arch: str | None, precision: str = "fp32", parts: tuple[str, ...] = PARTS,
        model_names: list[str] | None = None, out: Path | None = None, correlate: tuple[str, ...] = ("gemm_1024",),
        configs: int = 64) -> dict:
    """The parts asked for, in the order of PARTS; with `out`, the result so far is written there
    after each part, so that a run cut short by a lease's end still leaves what it measured."""
    found = detect_cuda_arch()
    if found is None:
        print("gpu: no NVIDIA GPU here (nvidia-smi finds none): building the kernels with nvcc only, no timings",
              file=sys.stderr)
    target = Target.parse(f"cuda -arch={arch or found or DEFAULT_CUDA_ARCH} -precision={precision}")
    gpu = found is not None
    names = list(QUICK_KERNELS) if quick else [n for n in (*GEMMS, *CONVS) if n != "gemm_1024"]
    model_names = model_names or (["mlp"] if quick else list(MODELS))
    result: dict = {"gpu": None, "arch": target.gpu_capabilities.arch, "tests": None, "kernels": {}, "checks": {},
                    "static_model_spearman": None, "static_model": [], "models": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-gpu-") as tmp_dir:
        tmp = Path(tmp_dir)
        if gpu:
            from autosched.measure.gpu import GpuRunner
            with GpuRunner() as runner:
                result["gpu"] = runner.device["device"]
        def save() -> None:
            if out is not None:
                out.write_text(json.dumps(result, indent=1))

        steps = {"tests": lambda: cuda_tests(out.with_suffix(".tests.log") if out else None),
                 "kernels": lambda: kernels(target, names, tmp, gpu),
                 "checks": lambda: checks(target.gpu_capabilities.arch, model_names, tmp, result["checks"], save),
                 "correlation": lambda: [correlation(target, k, 8 if quick else configs, tmp) for k in correlate],
                 "models": lambda: models(target, model_names, 16 if quick else trials, tmp)}
        for part in PARTS:
            if part not in parts or (part != "kernels" and not gpu):
                continue
            started = time.perf_counter()
            result["static_model" if part == "correlation" else part] = steps[part]()
            if part == "correlation":
                result["static_model_spearman"] = result["static_model"][0]["spearman"]
            print(f"gpu: {part} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            save()
    return result


def _cell(value: float | int | None, width: int, spec: str) -> str:
    return format(value, f">{width}{spec}") if value is not None else format("-", f">{width}")


def _model_names(arg: str | None) -> list[str] | None:
    """--models: names, with 'beside' standing for every model beside the zoo (unseen blocks)."""
    if arg is None:
        return None
    from autosched.zoo_blocks import BLOCKS
    return [m for n in arg.split(",") for m in ([*zoo.OTHERS, *BLOCKS] if n == "beside" else [n])]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a smoke run: two kernels, the MLP, 16 trials")
    p.add_argument("--trials", type=int, default=300, help="trials per model's tune (default 300)")
    p.add_argument("--arch", help="architecture to build for (default: the GPU's, else sm_80)")
    p.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16"), default="fp32",
                   help="the target's precision for the kernels, the correlation and the tunes (default fp32)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"which parts, comma-separated (default: {','.join(PARTS)})")
    p.add_argument("--models", help="models for the checks and model timings, comma-separated: the zoo's (the "
                                    "default), those beside it (zoo.OTHERS, zoo_blocks), or 'beside' for all of those")
    p.add_argument("--correlate", default="gemm_1024",
                   help="kernels whose sampled configs the static model is compared on, comma-separated")
    p.add_argument("--configs", type=int, default=64, help="sampled configs per kernel for the correlation")
    p.add_argument("--out", type=Path, help="write the result so far to this JSON file after each part")
    args = p.parse_args(argv)
    parts = tuple(args.parts.split(","))
    if unknown := set(parts) - set(PARTS):
        p.error(f"--parts: unknown {', '.join(sorted(unknown))}; expected some of {', '.join(PARTS)}")
    result = run(args.quick, args.trials, args.arch, args.precision, parts,
                 _model_names(args.models), args.out, tuple(args.correlate.split(",")),
                 args.configs)
    if args.json:
        print(json.dumps(result))
        return result
    print(f"GPU: {result['gpu'] or 'none (nvcc builds only)'}, {result['arch']}")
    if result["tests"]:
        t = result["tests"]
        print(f"cuda tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped"
              + (f" ({', '.join(t['failures'])})" if t["failures"] else ""))
    print(f"{'kernel':<16} {'GFLOP':>7} {'static us':>10} {'regs':>5} {'occup.':>6} {'autosched ms':>12} "
          f"{'pipelined':>9} {'split':>9} {'library ms':>10} {'ratio':>6}")
    for name, r in result["kernels"].items():
        if "error" in r:
            print(f"{name:<16} {r['flops'] / 1e9:>7.2f}  {r['error']}")
            continue
        print(f"{name:<16} {r['flops'] / 1e9:>7.2f} {_cell(r.get('static_us'), 10, '.4g')} "
              f"{_cell(r.get('registers'), 5, 'd')} {_cell(r.get('occupancy'), 6, '.0%')} "
              f"{_cell(r.get('autosched_ms'), 12, '.4g')} {_cell(r.get('pipelined_ms'), 9, '.4g')} "
              f"{_cell(r.get('split_ms'), 9, '.4g')} "
              f"{_cell(r.get('library_ms'), 10, '.4g')} "
              f"{_cell(r.get('ratio'), 6, '.2f')}")
    for c in result["static_model"]:
        print(f"static model vs GPU time ({c['precision']}), Spearman over {len(c['configs'])} sampled configs of "
              f"{c['kernel']}: {_cell(c['spearman'], 5, '.2f')}")
    for name, r in result["checks"].items():
        print(f"check {name:<20} {'ok' if r['ok'] else 'FAILED'}  max rel err {_cell(r.get('max_rel_err'), 9, '.2e')}"
              + (f"  {r['error']}" if "error" in r else ""))
    for name, r in result["models"].items():
        print(f"{name:<12} {r['reference']} {r['reference_ms']:.3f} ms; autosched untuned {r['untuned_ms']:.3f} ms "
              f"({r['untuned_ratio']:.2f}x), tuned {r['tuned_ms']:.3f} ms ({r['tuned_ratio']:.2f}x)")
    return result


if __name__ == "__main__":
    main()
