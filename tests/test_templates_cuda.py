"""GPU templates: every one correct in the CPU emulation against the task's numpy reference for
random configs and odd sizes, and compiled by nvcc for sm_80 and sm_90 (no GPU is used)."""
import shutil

import numpy as np
import pytest

from autosched.kernel import build_kernel
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import MeasureInput
from autosched.target import Target
from search_spaces import TemplateError, get_template
from tests.task_helpers import attention_scores_task, gemm_task, matmul_task

SM80 = Target.parse("cuda -arch=sm_80")

TASKS = {
    "matmul_relu_odd": lambda: matmul_task((37, 29), (29, 51), relu=True),
    "gemm_dense_bias": lambda: gemm_task((64, 100), (70, 100), (70,), trans_b=1),
    "gemm_trans_a_alpha_beta": lambda: gemm_task((20, 33), (20, 12), (33, 12), trans_a=1, alpha=0.5, beta=2.0),
    "batched_attention": lambda: attention_scores_task((2, 3), 17, 8, 19),
}


def _configs(task, n_random: int, seed: int):
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    rng = np.random.default_rng(seed)
    return template, [template.fallback(task, SM80)] + [space.get(int(i)) for i in rng.integers(0, len(space), n_random)]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_emulated_template_matches_reference(name):
    task = TASKS[name]()
    template, configs = _configs(task, 3, seed=len(name))
    inputs = task.random_inputs(0)
    (want,) = task.reference(inputs)
    for config in configs:
        sched, args = template.apply(task, config, SM80)
        kernel = build_kernel(sched, args, "candidate", target="cuda-emulate")
        got = np.full(want.shape, np.nan, np.float32)
        kernel(*inputs, got)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} config {config.to_json()}")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_sampled_configs(tmp_path, arch):
    target = Target.parse(f"cuda -arch={arch}")
    inputs = []
    for name in ("gemm_dense_bias", "batched_attention"):
        task = TASKS[name]()
        _, configs = _configs(task, 2, seed=7)
        inputs += [MeasureInput(task, target, c) for c in configs]
    results = NvccBuilder(n_parallel=2, timeout=120, cache_dir=tmp_path).build(inputs)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]


def test_gpu_template_refuses_a_cpu_target():
    task = TASKS["gemm_dense_bias"]()
    with pytest.raises(TemplateError, match="not a GPU target"):
        get_template("Gemm", "cuda").space(task, Target.parse("llvm"))
