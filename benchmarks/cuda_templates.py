"""GPU templates without a GPU: per template, the share of sampled configs that nvcc compiles
within the device's limits and the share whose CPU emulation matches the numpy reference, and
the nvcc build throughput.

    python benchmarks/cuda_templates.py [--json] [--configs 12] [--arch sm_80] [--seed 0]

Tasks come from the zoo models (written to a temporary directory): the MLP's first Gemm, the
cheapest Conv of ResNet-18, and BERT's Softmax and LayerNorm and ResNet-18's MaxPool for the
one-thread-per-output template. Each task gets its fallback config and `--configs` - 1 random
ones. Builds start from an empty cache, two nvcc processes at a time (the machine's two cores),
so configs/s is what a tuning run on this machine would see. No GPU is used or needed.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autosched import zoo  # noqa: E402
from autosched.frontend.onnx import load_onnx  # noqa: E402
from autosched.graph.passes import optimize  # noqa: E402
from autosched.measure.emulate import EmulationBuilder  # noqa: E402
from autosched.measure.interface import measure_with  # noqa: E402
from autosched.measure.local import LocalRunner, RunnerOptions  # noqa: E402
from autosched.measure.nvcc import NvccBuilder  # noqa: E402
from autosched.measure.record import ErrorKind, MeasureInput  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import extract_tasks  # noqa: E402
from search_spaces import get_template  # noqa: E402

#: template -> (zoo model, op, which of that op's tasks: "first" or "cheapest")
CASES = {
    "matmul_tiled_cuda": [("mlp", "Gemm", "first")],
    "conv2d_direct_cuda": [("resnet18", "Conv", "cheapest")],
    "pointwise_cuda": [("bert_layer", "Softmax", "first"), ("bert_layer", "LayerNormalization", "first"),
                       ("resnet18", "MaxPool", "first")],
}


def _task(models: Path, model: str, op: str, pick: str):
    tasks = [t for t in extract_tasks(optimize(load_onnx(models / f"{model}.onnx"))).tasks if t.op == op]
    return min(tasks, key=lambda t: t.flops) if pick == "cheapest" else tasks[0]


def _inputs(task, target: Target, n: int, rng: np.random.Generator) -> list[MeasureInput]:
    template = get_template(task.op, target.kind)
    space = template.space(task, target)
    fallback = template.fallback(task, target)
    configs = [fallback] + [space.get(i) for i in space.sample(min(n, len(space)) - 1, rng, exclude={fallback.index})]
    return [MeasureInput(task, target, c) for c in configs]


def run(configs: int, arch: str, seed: int) -> dict:
    target = Target.parse(f"cuda -arch={arch}")
    rng = np.random.default_rng(seed)
    out = {"arch": arch, "configs_per_task": configs, "templates": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        models = Path(tmp) / "models"
        for name in {m for cases in CASES.values() for m, _, _ in cases}:
            models.mkdir(exist_ok=True)
            onnx.save(zoo.MODELS[name](), models / f"{name}.onnx")
        for template, cases in CASES.items():
            inputs = [i for case in cases for i in _inputs(_task(models, *case), target, configs, rng)]
            nvcc = NvccBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / f"nvcc-{template}")
            start = time.perf_counter()
            built = nvcc.build(inputs)
            build_s = time.perf_counter() - start
            emulate = EmulationBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / f"emu-{template}")
            with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0, threads=1)) as runner:
                emulated = measure_with(emulate, runner)(inputs)
            kinds: dict[str, int] = {}
            for r in list(built) + list(emulated):
                if not r.ok:
                    kinds[r.error_kind.name] = kinds.get(r.error_kind.name, 0) + 1
            n = len(inputs)
            out["templates"][template] = {
                "tasks": [f"{m}:{op}" for m, op, _ in cases], "configs": n,
                "within_limits": sum(r.ok for r in built) / n,
                "over_limits": sum(r.error_kind is ErrorKind.RESOURCE_LIMIT for r in built) / n,
                "pass_emulation": sum(r.ok for r in emulated) / n,
                "nvcc_configs_per_s": n / build_s,
                "failures": kinds,
            }
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=12, help="configs per task, the fallback included (default 12)")
    p.add_argument("--arch", default="sm_80", help="architecture nvcc compiles for (default sm_80)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    result = run(args.configs, args.arch, args.seed)
    if args.json:
        print(json.dumps(result))
        return result
    print(f"GPU templates, {args.configs} configs per task, nvcc -arch={args.arch}, emulated on this CPU (no GPU)")
    print(f"{'template':<22} {'configs':>7} {'within limits':>13} {'pass emulation':>14} {'nvcc configs/s':>14}  failures")
    for name, r in result["templates"].items():
        print(f"{name:<22} {r['configs']:>7} {r['within_limits']:>13.0%} {r['pass_emulation']:>14.0%} "
              f"{r['nvcc_configs_per_s']:>14.2f}  {r['failures'] or '-'}")
    return result


if __name__ == "__main__":
    main()
