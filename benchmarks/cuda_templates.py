"""GPU templates without a GPU: per template, the share of sampled configs that nvcc compiles
within the device's limits and the share whose CPU emulation matches the numpy reference, and
the nvcc build throughput.

    python benchmarks/cuda_templates.py [--json] [--quick] [--configs 12] [--arch sm_80] [--seed 0]

Tasks come from the zoo models (written to a temporary directory): the MLP's first Gemm, the
cheapest Conv of ResNet-18 (once per algorithm: direct, implicit GEMM) and its 1x1 downsampling
Conv (implicit GEMM), and BERT's Softmax and LayerNorm and ResNet-18's MaxPool for the
pointwise template (once with any row_reduce, once a block a row); under `-precision=tf32` the
tensor-core templates (mma.sync with a cp.async pipeline) on the same Gemm and Convs.
Each row of the table is a template with some knobs pinned; each task gets the fallback config
and `--configs` - 1 random ones, with those knobs set to the pinned values. Builds start from an empty cache, two nvcc processes at a time (the machine's two cores),
so configs/s is what a tuning run on this machine would see. No GPU is used or needed; without
nvcc, one line says so and the table has the emulation alone. `--json` prints one object: `arch`,
`configs_per_task`, `nvcc` and per row in `templates` its `tasks`, `configs`, `pass_emulation`,
`failures` and, with nvcc, `within_limits`, `over_limits`, `nvcc_configs_per_s`. `--quick` is a
smoke run: the fallback config of each row's cheapest task.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
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
from autosched.templates import get_template  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One row of the table: a template's tasks (zoo model, op, "first" or "cheapest" or
    "1x1" of that op's tasks), with `pinned` knobs set on every sampled config, at the cuda
    target's `precision`."""

    template: str
    tasks: tuple[tuple[str, str, str], ...]
    pinned: tuple[tuple[str, object], ...] = ()
    precision: str = "fp32"

    @property
    def label(self) -> str:
        return " ".join([self.template] + [f"{k}={v}" for k, v in self.pinned])

    def target(self, arch: str) -> Target:
        return Target.parse(f"cuda -arch={arch}" + ("" if self.precision == "fp32" else f" -precision={self.precision}"))


ROWS = (("bert_layer", "Softmax", "first"), ("bert_layer", "LayerNormalization", "first"))
CASES = (
    Case("matmul_tiled_cuda", (("mlp", "Gemm", "first"),)),
    Case("conv2d_cuda", (("resnet18", "Conv", "cheapest"),), (("algorithm", "direct"),)),
    Case("conv2d_cuda", (("resnet18", "Conv", "cheapest"), ("resnet18", "Conv", "1x1")),
         (("algorithm", "implicit_gemm"),)),
    Case("pointwise_cuda", ROWS + (("resnet18", "MaxPool", "first"),)),
    Case("pointwise_cuda", ROWS, (("row_reduce", "block"),)),
    Case("matmul_mma_cuda", (("mlp", "Gemm", "first"),), precision="tf32"),
    Case("conv2d_mma_cuda", (("resnet18", "Conv", "cheapest"), ("resnet18", "Conv", "1x1")), precision="tf32"),
)


def _task(models: Path, model: str, op: str, pick: str):
    tasks = [t for t in extract_tasks(optimize(load_onnx(models / f"{model}.onnx"))).tasks if t.op == op]
    if pick == "1x1":
        return next(t for t in tasks if t.shapes[1][2:] == (1, 1))
    return min(tasks, key=lambda t: t.flops) if pick == "cheapest" else tasks[0]


def _inputs(task, target: Target, n: int, rng: np.random.Generator, pinned: dict) -> list[MeasureInput]:
    template = get_template(task.op, target.kind)
    space = template.space(task, target)
    fallback = template.fallback(task, target)
    sampled = [fallback] + [space.get(i) for i in space.sample(min(n, len(space)) - 1, rng, exclude={fallback.index})]
    configs = {space.from_values({**{k.name: c[k.name] for k in space.knobs}, **pinned}) for c in sampled}
    return [MeasureInput(task, target, c) for c in sorted(configs, key=lambda c: c.index)]


def run(configs: int, arch: str, seed: int, cheapest_task_only: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    nvcc_found = shutil.which("nvcc") is not None
    if not nvcc_found:
        print("cuda_templates: nvcc not found, so no builds within the device's limits: emulation only",
              file=sys.stderr)
    out = {"arch": arch, "configs_per_task": configs, "nvcc": nvcc_found, "templates": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        models = Path(tmp) / "models"
        for name in {m for case in CASES for m, _, _ in case.tasks}:
            models.mkdir(exist_ok=True)
            onnx.save(zoo.MODELS[name](), models / f"{name}.onnx")
        for row, case in enumerate(CASES):
            tasks = {spec: _task(models, *spec) for spec in case.tasks}
            if cheapest_task_only:  # emulation time grows with the work: Softmax a block a row takes 30 s
                tasks = dict([min(tasks.items(), key=lambda spec_task: spec_task[1].flops)])
            inputs = [i for t in tasks.values() for i in _inputs(t, case.target(arch), configs, rng, dict(case.pinned))]
            n = len(inputs)
            figures = out["templates"][case.label] = {"tasks": [f"{m}:{op}:{pick}" for m, op, pick in tasks],
                                                      "configs": n}
            built = []
            if nvcc_found:
                nvcc = NvccBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / f"nvcc-{row}")
                start = time.perf_counter()
                built = nvcc.build(inputs)
                figures.update(within_limits=sum(r.ok for r in built) / n,
                               over_limits=sum(r.error_kind is ErrorKind.RESOURCE_LIMIT for r in built) / n,
                               nvcc_configs_per_s=n / (time.perf_counter() - start))
            emulate = EmulationBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / f"emu-{row}")
            with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0, threads=1)) as runner:
                emulated = measure_with(emulate, runner)(inputs)
            kinds: dict[str, int] = {}
            for r in list(built) + list(emulated):
                if not r.ok:
                    kinds[r.error_kind.name] = kinds.get(r.error_kind.name, 0) + 1
            figures.update(pass_emulation=sum(r.ok for r in emulated) / n, failures=kinds)
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=12, help="configs per task, the fallback included (default 12)")
    p.add_argument("--arch", default="sm_80", help="architecture nvcc compiles for (default sm_80)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: the fallback config of each row's cheapest task")
    args = p.parse_args(argv)
    result = run(1 if args.quick else args.configs, args.arch, args.seed, cheapest_task_only=args.quick)
    if args.json:
        print(json.dumps(result))
        return result
    print(f"GPU templates, {result['configs_per_task']} configs per task, nvcc -arch={args.arch}, emulated on this CPU "
          "(no GPU)")
    print(f"{'template':<46} {'configs':>7} {'within limits':>13} {'pass emulation':>14} {'nvcc configs/s':>14}  failures")
    for name, r in result["templates"].items():
        limits, speed = (f"{r['within_limits']:>13.0%}", f"{r['nvcc_configs_per_s']:>14.2f}") if result["nvcc"] else \
            (f"{'-':>13}", f"{'-':>14}")
        print(f"{name:<46} {r['configs']:>7} {limits} {r['pass_emulation']:>14.0%} {speed}  {r['failures'] or '-'}")
    return result


if __name__ == "__main__":
    main()
