"""Static checks of the GPU templates' machine code, for sm_80 and sm_90 (nvcc and cuobjdump
here; no GPU needed): the fallback of every template builds without local memory (no spills,
no register arrays demoted to memory); where the CUDA source asks for float4 accesses the SASS
has 128-bit loads and stores; registers and occupancy as ptxas and the occupancy rules give them,
for the fallbacks and sampled configs."""
import re

import numpy as np
import onnx
import pytest

from autosched import zoo
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.sass import sass_available
from autosched.frontend.onnx import load_onnx
from autosched.graph.passes import optimize
from autosched.lower import lower
from autosched.measure.nvcc import NvccBuilder, inspect_build
from autosched.measure.record import MeasureInput
from autosched.target import Target
from autosched.task import extract_tasks
from autosched.templates import get_template
from tests.cuda_markers import ARCHS, needs_nvcc

pytestmark = [needs_nvcc, pytest.mark.skipif(not sass_available(), reason="cuobjdump/nvdisasm not installed")]

#: (zoo model, op, pick): the tasks of each template that the tests build
TASKS = (("mlp", "Gemm", "first"), ("bert_layer", "MatMul", "first"), ("resnet18", "Conv", "first"),
         ("resnet18", "Conv", "1x1"), ("resnet18", "Conv", "last"), ("bert_layer", "Softmax", "first"),
         ("bert_layer", "LayerNormalization", "first"), ("resnet18", "MaxPool", "first"))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    out = {}
    for name in {m for m, _, _ in TASKS}:
        path = tmp_path_factory.mktemp("zoo") / f"{name}.onnx"
        onnx.save(zoo.MODELS[name](), path)
        found = extract_tasks(optimize(load_onnx(path))).tasks
        for model, op, pick in TASKS:
            if model != name:
                continue
            of_op = [t for t in found if t.op == op]
            if pick == "1x1":
                out[(model, op, pick)] = next(t for t in of_op if t.shapes[1][2:] == (1, 1))
            else:
                out[(model, op, pick)] = of_op[0] if pick == "first" else of_op[-1]
    return out


def vector_sites(source: str) -> dict[str, int]:
    """float4 accesses the CUDA source asks for, by kind: global loads, shared loads and stores."""
    params = re.findall(r"float\* __restrict__ (\w+)", source)
    shared = re.findall(r"float\* (\w+) = \(float\*\)\(autosched_smem", source)
    loads = re.findall(r"\*\(const float4\*\)&(\w+)\[", source)
    stores = re.findall(r"\*\(float4\*\)&(\w+)\[", source)
    return {"ldg128": sum(n in params for n in loads), "lds128": sum(n in shared for n in loads),
            "sts128": sum(n in shared for n in stores)}


def _build(tmp_path, task, target, configs):
    inputs = [MeasureInput(task, target, c) for c in configs]
    return inputs, NvccBuilder(n_parallel=2, cache_dir=tmp_path).build(inputs)


@pytest.mark.parametrize("arch", ["sm_80", pytest.param("sm_90", marks=pytest.mark.slow)])  # 12-13 s each
def test_fallbacks_have_no_local_memory_and_the_vector_accesses_they_ask_for(tmp_path, tasks, arch):
    target = Target.parse(f"cuda -arch={arch}")
    caps = target.gpu_capabilities
    for spec, task in tasks.items():
        template = get_template(task.op, "cuda")
        fallback = template.fallback(task, target)
        _, [built] = _build(tmp_path, task, target, [fallback])
        assert built.ok, (spec, built.error_msg)
        seen = inspect_build(built.artifact, caps)
        assert seen.usage.spill_stores == seen.usage.spill_loads == 0 and seen.sass.spills == 0, (spec, seen.summary())
        assert 0 < seen.usage.registers <= caps.max_registers_per_thread and 0 < seen.occupancy <= 1, spec
        sched, args = template.apply(task, fallback, target)
        source = CudaRenderer().render(lower(sched, args, "candidate"))
        asked = vector_sites(source)
        for kind, op in (("ldg128", "LDG"), ("lds128", "LDS"), ("sts128", "STS")):
            if asked[kind]:
                assert seen.sass.count(op, 128) > 0, (spec, kind, asked, seen.summary())
        if "shuffle" in str(fallback.to_json()):
            assert seen.sass.count("SHFL") > 0, spec


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_configs_report_registers_and_occupancy(tmp_path, tasks, arch):
    """Every sampled config within the limits has the registers ptxas reported and an occupancy
    the multiprocessor's limits allow; spills ptxas reports are local loads and stores in the SASS."""
    target = Target.parse(f"cuda -arch={arch}")
    caps = target.gpu_capabilities
    rng = np.random.default_rng(0)
    task = tasks[("mlp", "Gemm", "first")]
    space = get_template(task.op, "cuda").space(task, target)
    configs = [space.get(int(i)) for i in space.sample(8, rng)]
    _, builds = _build(tmp_path, task, target, configs)
    seen = [inspect_build(b.artifact, caps) for b in builds if b.ok]
    assert seen, [b.error_msg for b in builds]
    for s in seen:
        assert s.usage.registers * caps.warp_size <= caps.registers_per_sm and 0 < s.occupancy <= 1
        if s.usage.spill_stores + s.usage.spill_loads:  # what ptxas spilled, the SASS loads and stores locally
            assert s.sass.spills > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_the_fp32_matmul_loads_both_operands_128_bits_wide(tmp_path, arch):
    """A's tile rows are 8 floats and a thread copies 4: its index (4x + lane) // 8 · K + (4x + lane) % 8
    is contiguous in the lane once the lane is pulled out of the division (`arith`), so A is one
    LDG.128 a step like B (it was four scalar LDG). The fallback's tiles without the pipeline
    (what it is before sm_80)."""
    from tests.task_helpers import matmul_task
    target = Target.parse(f"cuda -arch={arch}")
    task = matmul_task((1024, 1024), (1024, 1024))
    template = get_template(task.op, "cuda")
    knobs = {k.name: template.fallback(task, target)[k.name] for k in template.space(task, target).knobs}
    config = template.space(task, target).from_values({**knobs, "double_buffer": 0})
    _, [built] = _build(tmp_path, task, target, [config])
    sass = inspect_build(built.artifact, target.gpu_capabilities).sass
    assert sass.count("LDG", 128) == sass.count("LDG") == 2


@pytest.mark.parametrize("arch", ARCHS)
def test_the_fp32_matmul_fallback_is_an_ldgsts_pipeline_with_one_barrier_a_step(tmp_path, arch):
    from tests.task_helpers import matmul_task
    target = Target.parse(f"cuda -arch={arch}")
    task = matmul_task((1024, 1024), (1024, 1024))
    config = get_template(task.op, "cuda").fallback(task, target)
    assert config["double_buffer"] == 3  # a 3-stage cp.async pipeline on sm_80 and later
    _, [built] = _build(tmp_path, task, target, [config])
    seen = inspect_build(built.artifact, target.gpu_capabilities)
    assert seen.sass.count("LDGSTS", 128) == seen.sass.count("LDGSTS") == 6  # A and B, 3 stages (prologue 2, loop 1)
    assert seen.sass.count("LDG") == 0 and seen.sass.count("BAR") == 1 and seen.usage.spill_stores == 0
