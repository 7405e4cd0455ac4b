"""One command for a machine with an NVIDIA GPU: everything autosched's CUDA side can be measured
against, in one run.

    python benchmarks/gpu.py [--json] [--quick] [--trials 300] [--arch sm_90]

1. the `cuda`-marked tests (`pytest -m cuda`): passed, failed, skipped;
2. kernels: the fallback kernel of GEMM 4096³ and of the BERT-base (sequence 128) GEMMs and
   ResNet-18 convolutions, timed by the GPU runner (CUDA events, checked against numpy) against
   cuBLAS / cuDNN through PyTorch or CuPy (whichever imports; FP32, TF32 off), with the ratio
   autosched / library (below 1 is faster), the static model's estimate beside the measured time,
   and the Spearman correlation of estimate and time over sampled configs of the 1024³ MatMul;
3. models: each zoo model built untuned and after a tune of `--trials` trials (a database in a
   temporary directory), run through its built library, against onnxruntime's CUDA execution
   provider (onnxruntime-gpu), with the ratios.

On a machine without a GPU it says so in one line and does only what needs nvcc: it builds every
kernel of part 2 and reports its registers, occupancy, SASS mix and static estimate (no times).
`--json` prints one object: `gpu` (the device, or null), `arch`, `tests` (null without a GPU),
`kernels` (per shape: `flops`, `static_us`, `registers`, `occupancy`, `sass`, and with a GPU
`autosched_ms`, `library_ms`, `library`, `ratio`), `static_model_spearman` (null without a GPU)
and `models` (per model: `untuned_ms`, `tuned_ms`, `onnxruntime_ms`, `untuned_ratio`,
`tuned_ratio`; empty without a GPU). `--quick`: GEMM 1024³ and one convolution, one model
(the MLP), 16 trials, 8 configs for the correlation.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import tempfile
import time
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
    """cuBLAS and cuDNN through PyTorch, else CuPy (cuBLAS only); FP32 without TF32, as autosched's default."""

    def __init__(self) -> None:
        self.name, self.torch, self.cupy = None, None, None
        try:
            import torch
            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
                self.name, self.torch = f"torch {torch.__version__}", torch
                return
        except ImportError:
            pass
        try:
            import cupy
            self.name, self.cupy = f"cupy {cupy.__version__}", cupy
        except ImportError:
            pass

    def _time(self, fn, sync, event, repeat: int = 20) -> float:
        for _ in range(3):
            fn()
        sync()
        start, end = event(), event()
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / repeat if self.torch else \
            self.cupy.cuda.get_elapsed_time(start, end) / repeat

    def gemm_ms(self, m: int, k: int, n: int) -> float | None:
        if self.torch:
            t = self.torch
            a, b = t.randn(m, k, device="cuda"), t.randn(k, n, device="cuda")
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
        x, w = t.randn(1, c, hw, hw, device="cuda"), t.randn(o, c, k, k, device="cuda")
        conv = t.nn.functional.conv2d
        return self._time(lambda: conv(x, w, stride=stride, padding=k // 2), t.cuda.synchronize,
                          lambda: t.cuda.Event(enable_timing=True))


def kernels(target: Target, names: list[str], tmp: Path, gpu: bool) -> dict:
    """Each shape's fallback kernel: built by nvcc, inspected, estimated, and with a GPU timed."""
    library = Library() if gpu else None
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
                row["library"] = library.name
                row["library_ms"] = library.gemm_ms(*shape) if name in GEMMS else library.conv_ms(*shape)
                if row["autosched_ms"] and row["library_ms"]:
                    row["ratio"] = row["autosched_ms"] / row["library_ms"]
            out[name] = row
    finally:
        if runner is not None:
            runner.close()
    return out


def correlation(target: Target, n: int, tmp: Path) -> float | None:
    """Spearman correlation of the static estimate and the GPU time over `n` sampled configs of
    the 1024³ MatMul (configs that build and run)."""
    from autosched.measure.gpu import GpuRunner
    task = _task(_gemm_model(*GEMMS["gemm_1024"], tmp / "gemm_corr.onnx"))
    space = get_template(task.op, "cuda").space(task, target)
    inputs = [MeasureInput(task, target, space.get(i)) for i in space.sample(min(n, len(space)), np.random.default_rng(0))]
    with GpuRunner(RunnerOptions(repeat=3, min_repeat_ms=20.0)) as runner:
        results = measure_with(NvccBuilder(n_parallel=2, cache_dir=tmp / "corr"), runner)(inputs)
    pairs = []
    for inp, res in zip(inputs, results):
        if res.ok:
            func, geometry = lower_for_gpu(inp, instantiate_from_template)
            pairs.append((static_estimate(inp, func, geometry, str(tmp / "corr"), 120.0).seconds, res.cost))
    return float(spearman([p for p, _ in pairs], [c for _, c in pairs])) if len(pairs) > 2 else None


def cuda_tests() -> dict:
    """The cuda-marked tests, as `pytest -m cuda` reports them."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=ROOT, capture_output=True, text=True)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error|errors)", proc.stdout)}
    return {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0) + counts.get("errors", 0)
            + counts.get("error", 0), "skipped": counts.get("skipped", 0), "exit_status": proc.returncode}


def _median_ms(run, feeds: dict, runs: int) -> float:
    """Median wall milliseconds of `run(feeds)` (a warm-up call first)."""
    run(feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


def models(target: Target, names: list[str], trials: int, tmp: Path, runs: int = 20) -> dict:
    """Each model untuned and tuned (built libraries, host arrays in and out) against onnxruntime's
    CUDA execution provider (the same host arrays: copies included on both sides)."""
    import onnxruntime as ort

    from autosched.compile.evaluate import sample_inputs
    from autosched.runtime.model import load_model
    out: dict = {}
    providers = ["CUDAExecutionProvider"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print("gpu: onnxruntime has no CUDA execution provider (pip install onnxruntime-gpu): models skipped",
              file=sys.stderr)
        return out
    for name in names:
        path = tmp / f"{name}.onnx"
        onnx.save(zoo.MODELS[name](), path)
        feeds = sample_inputs(optimize(load_onnx(path)), 0)
        session = ort.InferenceSession(str(path), providers=providers)
        row = {"onnxruntime_ms": _median_ms(functools.partial(session.run, None), feeds, runs)}
        db = tmp / f"{name}.db"
        for label, tuned in (("untuned", False), ("tuned", True)):
            if tuned:
                tune(path, target, trials, db=db)
            lib = tmp / f"{name}_{label}.so"
            build(path, target, db=db, output=lib, shipped=False)
            model = load_model(lib)
            row[f"{label}_ms"] = _median_ms(model.run, feeds, runs)
            row[f"{label}_ratio"] = row[f"{label}_ms"] / row["onnxruntime_ms"]
            model.close()
        out[name] = row
    return out


def run(quick: bool, trials: int, arch: str | None) -> dict:
    found = detect_cuda_arch()
    if found is None:
        print("gpu: no NVIDIA GPU here (nvidia-smi finds none): building the kernels with nvcc only, no timings",
              file=sys.stderr)
    target = Target.parse(f"cuda -arch={arch or found or DEFAULT_CUDA_ARCH}")
    gpu = found is not None
    names = list(QUICK_KERNELS) if quick else [n for n in (*GEMMS, *CONVS) if n != "gemm_1024"]
    with tempfile.TemporaryDirectory(prefix="autosched-gpu-") as tmp_dir:
        tmp = Path(tmp_dir)
        result: dict = {"gpu": None, "arch": target.gpu_capabilities.arch, "tests": None}
        if gpu:
            from autosched.measure.gpu import GpuRunner
            with GpuRunner() as runner:
                result["gpu"] = runner.device["device"]
            result["tests"] = cuda_tests()
        result["kernels"] = kernels(target, names, tmp, gpu)
        result["static_model_spearman"] = correlation(target, 8 if quick else 64, tmp) if gpu else None
        result["models"] = models(target, ["mlp"] if quick else list(MODELS), 16 if quick else trials, tmp) \
            if gpu else {}
    return result


def _cell(value: float | int | None, width: int, spec: str) -> str:
    return format(value, f">{width}{spec}") if value is not None else format("-", f">{width}")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="a smoke run: two kernels, the MLP, 16 trials")
    p.add_argument("--trials", type=int, default=300, help="trials per model's tune (default 300)")
    p.add_argument("--arch", help="architecture to build for (default: the GPU's, else sm_80)")
    args = p.parse_args(argv)
    result = run(args.quick, args.trials, args.arch)
    if args.json:
        print(json.dumps(result))
        return result
    print(f"GPU: {result['gpu'] or 'none (nvcc builds only)'}, {result['arch']}")
    if result["tests"]:
        t = result["tests"]
        print(f"cuda tests: {t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped")
    print(f"{'kernel':<16} {'GFLOP':>7} {'static us':>10} {'regs':>5} {'occup.':>6} {'autosched ms':>12} "
          f"{'library ms':>10} {'ratio':>6}")
    for name, r in result["kernels"].items():
        if "error" in r:
            print(f"{name:<16} {r['flops'] / 1e9:>7.2f}  {r['error']}")
            continue
        print(f"{name:<16} {r['flops'] / 1e9:>7.2f} {_cell(r.get('static_us'), 10, '.4g')} "
              f"{_cell(r.get('registers'), 5, 'd')} {_cell(r.get('occupancy'), 6, '.0%')} "
              f"{_cell(r.get('autosched_ms'), 12, '.4g')} {_cell(r.get('library_ms'), 10, '.4g')} "
              f"{_cell(r.get('ratio'), 6, '.2f')}")
    if result["static_model_spearman"] is not None:
        print(f"static model vs GPU time, Spearman over sampled 1024³ MatMul configs: "
              f"{result['static_model_spearman']:.2f}")
    for name, r in result["models"].items():
        print(f"{name:<12} onnxruntime CUDA {r['onnxruntime_ms']:.3f} ms; autosched untuned {r['untuned_ms']:.3f} ms "
              f"({r['untuned_ratio']:.2f}x), tuned {r['tuned_ms']:.3f} ms ({r['tuned_ratio']:.2f}x)")
    return result


if __name__ == "__main__":
    main()
