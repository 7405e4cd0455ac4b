"""GPU templates without a GPU: per template, the share of sampled configs that nvcc compiles
within the device's limits and the share whose CPU emulation matches the numpy reference, the
nvcc build throughput, and what the machine code of the configs within the limits says (SASS
via cuobjdump, registers via ptxas); then how the static model of a GPU kernel ranks sampled
configs of the 1024³ matmul.

    python benchmarks/cuda_templates.py [--json] [--quick] [--configs 12] [--arch sm_80] [--seed 0]
                                        [--static-configs 300]

Tasks come from the zoo models (written to a temporary directory): the MLP's first Gemm, the
cheapest Conv of ResNet-18 (once per algorithm: direct, implicit GEMM) and its 1x1 downsampling
Conv (implicit GEMM), and BERT's Softmax and LayerNorm and ResNet-18's MaxPool for the
pointwise template (once with any row_reduce, once a block a row through shared memory, once
with warp shuffles); under `-precision=tf32` the tensor-core templates (mma.sync with a cp.async
pipeline) on the same Gemm and Convs, and the MatMul's under fp16 and bf16 (rows named so).
Each row of the table is a template with some knobs pinned; each task gets the fallback config
and `--configs` - 1 random ones, with those knobs set to the pinned values. Builds start from an empty cache, two nvcc processes at a time (the machine's two cores),
so configs/s is what a tuning run on this machine would see. No GPU is used or needed; without
nvcc, one line says so and the table has the emulation alone. `--json` prints one object: `arch`,
`configs_per_task`, `nvcc` and per row in `templates` its `tasks`, `configs`, `pass_emulation`,
`failures` and, with nvcc, `within_limits`, `over_limits`, `nvcc_configs_per_s` (every row's
configs are built in one batch, on both cores: the rate is the batch's), and `sass`
(the configs within the limits: `registers` and `occupancy` medians, the shares with `local`
memory (spills), `ldg128`, `lds128`, `ldsm`, `shfl`, `hmma`, `ldgsts` instructions; with cuobjdump);
with nvcc, `static_model` ranks `--static-configs` sampled configs of a 1024³ MatMul: `configs`,
`built`, the estimate's `best_us`, `median_us`, `worst_us`, the `fallback_us` and its `fallback_rank`,
and the `top` five (knobs, estimate, bound). `--quick` is a smoke run: the fallback config of
each row's cheapest task, and 3 static-model configs.
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
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from autosched import zoo  # noqa: E402
from autosched.codegen.sass import sass_available  # noqa: E402
from autosched.frontend.onnx import load_onnx  # noqa: E402
from autosched.graph.passes import optimize  # noqa: E402
from autosched.measure.emulate import EmulationBuilder, static_estimate  # noqa: E402
from autosched.measure.gpu_build import lower_for_gpu  # noqa: E402
from autosched.measure.interface import measure_with  # noqa: E402
from autosched.measure.local import LocalRunner, RunnerOptions, instantiate_from_template  # noqa: E402
from autosched.measure.nvcc import NvccBuilder, inspect_build  # noqa: E402
from autosched.measure.record import ErrorKind, MeasureInput  # noqa: E402
from autosched.target import Target  # noqa: E402
from autosched.task import extract_tasks  # noqa: E402
from autosched.templates import get_template  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One row of the table: a template's tasks (zoo model, op, "first", "cheapest", "cheapest
    window" (kernel larger than 1×1) or "1x1" of that op's tasks), with `pinned` knobs set on every sampled config, at the cuda
    target's `precision`."""

    template: str
    tasks: tuple[tuple[str, str, str], ...]
    pinned: tuple[tuple[str, object], ...] = ()
    precision: str = "fp32"

    @property
    def label(self) -> str:
        precision = [] if self.precision in ("fp32", "tf32") else [self.precision]  # the mma templates are tf32's
        return " ".join([self.template] + precision + [f"{k}={v}" for k, v in self.pinned])

    def target(self, arch: str) -> Target:
        return Target.parse(f"cuda -arch={arch}" + ("" if self.precision == "fp32" else f" -precision={self.precision}"))


ROWS = (("bert_layer", "Softmax", "first"), ("bert_layer", "LayerNormalization", "first"))
CASES = (
    Case("matmul_tiled_cuda", (("mlp", "Gemm", "first"),)),
    # the direct algorithm on a window: a 1×1 convolution's fallback is the implicit GEMM
    Case("conv2d_cuda", (("resnet18", "Conv", "cheapest window"),), (("algorithm", "direct"),)),
    Case("conv2d_cuda", (("resnet18", "Conv", "cheapest"), ("resnet18", "Conv", "1x1")),
         (("algorithm", "implicit_gemm"),)),
    Case("pointwise_cuda", ROWS + (("resnet18", "MaxPool", "first"),)),
    Case("pointwise_cuda", ROWS, (("row_reduce", "block"),)),
    Case("pointwise_cuda", ROWS, (("row_reduce", "shuffle"),)),
    Case("matmul_mma_cuda", (("mlp", "Gemm", "first"),), precision="tf32"),
    Case("conv2d_mma_cuda", (("resnet18", "Conv", "cheapest"), ("resnet18", "Conv", "1x1")), precision="tf32"),
    Case("matmul_mma_cuda", (("mlp", "Gemm", "first"),), precision="fp16"),
    Case("matmul_mma_cuda", (("mlp", "Gemm", "first"),), precision="bf16"),
)


def _task(models: Path, model: str, op: str, pick: str):
    tasks = [t for t in extract_tasks(optimize(load_onnx(models / f"{model}.onnx"))).tasks if t.op == op]
    if pick == "1x1":
        return next(t for t in tasks if t.shapes[1][2:] == (1, 1))
    if pick == "cheapest window":
        tasks = [t for t in tasks if t.shapes[1][2:] != (1, 1)]
    return min(tasks, key=lambda t: t.flops) if pick.startswith("cheapest") else tasks[0]


def _inputs(task, target: Target, n: int, rng: np.random.Generator, pinned: dict) -> list[MeasureInput]:
    template = get_template(task.op, target.kind)
    space = template.space(task, target)
    fallback = template.fallback(task, target)
    sampled = [fallback] + [space.get(i) for i in space.sample(min(n, len(space)) - 1, rng, exclude={fallback.index})]
    configs = {space.from_values({**{k.name: c[k.name] for k in space.knobs}, **pinned}) for c in sampled}
    return [MeasureInput(task, target, c) for c in sorted(configs, key=lambda c: c.index)]


SASS_OPS = ("local", "ldg128", "lds128", "ldsm", "shfl", "hmma", "ldgsts")


def _sass_columns(built: list, target: Target) -> dict:
    """Medians of registers and occupancy, and the share of configs with each instruction kind,
    over the configs nvcc built within the limits."""
    seen = [inspect_build(b.artifact, target.gpu_capabilities).summary() for b in built if b.ok]
    if not seen:
        return {}
    return {"registers": float(np.median([s["registers"] for s in seen])),
            "occupancy": float(np.median([s["occupancy"] for s in seen])),
            **{op: sum(s[op] > 0 for s in seen) / len(seen) for op in SASS_OPS}}


def _matmul_1024(models: Path):
    """The MatMul task of a 1024³ product (A times a 1024×1024 weight)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, (1024, 1024), np.zeros(1024 * 1024, np.float32).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul_1024",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, models / "matmul_1024.onnx")
    return extract_tasks(optimize(load_onnx(models / "matmul_1024.onnx"))).tasks[0]


def rank_statically(models: Path, target: Target, n: int, rng: np.random.Generator, cache: Path) -> dict:
    """The static model's estimates of `n` sampled configs (the fallback among them) of the 1024³ MatMul."""
    task = _matmul_1024(models)
    template = get_template(task.op, target.kind)
    fallback = template.fallback(task, target)
    space = template.space(task, target)
    configs = [fallback] + [space.get(i) for i in space.sample(min(n, len(space)) - 1, rng, exclude={fallback.index})]
    inputs = [MeasureInput(task, target, c) for c in configs]
    built = NvccBuilder(n_parallel=2, timeout=120, cache_dir=cache).build(inputs)  # the cubins the estimates read
    estimates = []
    for inp, b in zip(inputs, built):
        if b.ok:
            func, geometry = lower_for_gpu(inp, instantiate_from_template)
            estimates.append((static_estimate(inp, func, geometry, str(cache), 120.0), inp.config))
    estimates.sort(key=lambda e: e[0].seconds)
    us = [e.seconds * 1e6 for e, _ in estimates]
    rank = next((k for k, (_, c) in enumerate(estimates) if c.index == fallback.index), None)
    return {"task": "MatMul 1024x1024x1024", "configs": len(configs), "built": len(estimates),
            "best_us": us[0] if us else None, "median_us": float(np.median(us)) if us else None,
            "worst_us": us[-1] if us else None,
            "fallback_us": estimates[rank][0].seconds * 1e6 if rank is not None else None,
            "fallback_rank": None if rank is None else rank + 1,
            "top": [{"config": c.to_json()["knobs"],
                     "estimate_us": e.seconds * 1e6, "tflops": e.flops / e.seconds / 1e12, "bound": e.bound,
                     "occupancy": e.occupancy} for e, c in estimates[:5]]}


def run(configs: int, arch: str, seed: int, cheapest_task_only: bool = False, static_configs: int = 300) -> dict:
    target = Target.parse(f"cuda -arch={arch}")
    rng = np.random.default_rng(seed)
    nvcc_found = shutil.which("nvcc") is not None
    if not nvcc_found:
        print("cuda_templates: nvcc not found, so no builds within the device's limits: emulation only",
              file=sys.stderr)
    sass = nvcc_found and sass_available()
    if nvcc_found and not sass:
        print("cuda_templates: cuobjdump/nvdisasm not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm): "
              "no SASS columns", file=sys.stderr)
    out: dict = {"arch": arch, "configs_per_task": configs, "nvcc": nvcc_found, "templates": {}}
    with tempfile.TemporaryDirectory(prefix="autosched-bench-") as tmp:
        models = Path(tmp) / "models"
        for name in {m for case in CASES for m, _, _ in case.tasks}:
            models.mkdir(exist_ok=True)
            onnx.save(zoo.MODELS[name](), models / f"{name}.onnx")
        rows = []
        for case in CASES:
            tasks = {spec: _task(models, *spec) for spec in case.tasks}
            if cheapest_task_only:  # emulation time grows with the work: Softmax a block a row takes 30 s
                tasks = dict([min(tasks.items(), key=lambda spec_task: spec_task[1].flops)])
            rows.append((case, tasks,
                         [i for t in tasks.values() for i in _inputs(t, case.target(arch), configs, rng, dict(case.pinned))]))
        # every row's configs built and emulated in one batch each, so that both cores build even
        # where a row has a single config (--quick)
        everything = [i for _, _, inputs in rows for i in inputs]
        built_all: list = []
        if nvcc_found:
            start = time.perf_counter()
            built_all = NvccBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / "nvcc").build(everything)
            nvcc_per_s = len(everything) / (time.perf_counter() - start)
        emulate = EmulationBuilder(n_parallel=2, timeout=120, cache_dir=Path(tmp) / "emu")
        with LocalRunner(RunnerOptions(repeat=1, min_repeat_ms=0.0, timeout=300.0, threads=1)) as runner:
            emulated_all = measure_with(emulate, runner)(everything)
        offset = 0
        for case, tasks, inputs in rows:
            n = len(inputs)
            figures = out["templates"][case.label] = {"tasks": [f"{m}:{op}:{pick}" for m, op, pick in tasks],
                                                      "configs": n}
            built = built_all[offset:offset + n]
            emulated = emulated_all[offset:offset + n]
            offset += n
            if nvcc_found:
                figures.update(within_limits=sum(r.ok for r in built) / n,
                               over_limits=sum(r.error_kind is ErrorKind.RESOURCE_LIMIT for r in built) / n,
                               nvcc_configs_per_s=nvcc_per_s)
                if sass:
                    figures["sass"] = _sass_columns(built, target)
            kinds: dict[str, int] = {}
            for r in list(built) + list(emulated):
                if not r.ok:
                    kinds[r.error_kind.name] = kinds.get(r.error_kind.name, 0) + 1
            figures.update(pass_emulation=sum(r.ok for r in emulated) / n, failures=kinds)
        if sass:
            out["static_model"] = rank_statically(models, target, static_configs, rng, Path(tmp) / "static")
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configs", type=int, default=12, help="configs per task, the fallback included (default 12)")
    p.add_argument("--arch", default="sm_80", help="architecture nvcc compiles for (default sm_80)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quick", action="store_true", help="smoke run: the fallback config of each row's cheapest task")
    p.add_argument("--static-configs", type=int, default=300,
                   help="configs of the 1024³ MatMul the static model ranks (default 300)")
    args = p.parse_args(argv)
    result = run(1 if args.quick else args.configs, args.arch, args.seed, cheapest_task_only=args.quick,
                 static_configs=3 if args.quick else args.static_configs)
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
    if any(r.get("sass") for r in result["templates"].values()):
        print("\nmachine code of the configs within the limits (cuobjdump -sass; medians, then shares of configs):")
        print(f"{'template':<46} {'regs':>5} {'occup.':>6} " + " ".join(f"{op.upper():>7}" for op in SASS_OPS))
        for name, r in result["templates"].items():
            c = r.get("sass") or {}
            if c:
                print(f"{name:<46} {c['registers']:>5.0f} {c['occupancy']:>6.0%} "
                      + " ".join(f"{c[op]:>7.0%}" for op in SASS_OPS))
    st = result.get("static_model")
    if st and st["built"]:
        print(f"\nstatic model, {st['task']} on {args.arch}'s reference GPU: {st['built']} of {st['configs']} sampled "
              f"configs built; estimates best {st['best_us']:.4g} us, median {st['median_us']:.4g} us, worst "
              f"{st['worst_us']:.4g} us; the fallback {st['fallback_us']:.4g} us, rank {st['fallback_rank']}")
        for t in st["top"]:
            print(f"  {t['estimate_us']:>9.4g} us {t['tflops']:>6.2f} TFLOP/s  {t['bound']:<6} occupancy "
                  f"{t['occupancy']:.0%}  {t['config']}")
    return result


if __name__ == "__main__":
    main()
