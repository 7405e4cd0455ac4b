"""GPU templates: every one correct in the CPU emulation against the task's numpy reference for
random configs and odd sizes, and compiled by nvcc for sm_80 and sm_90 (no GPU is used)."""

import numpy as np
import pytest

from autosched.emulation import build_emulated_kernel
from autosched.graph.ir import Op
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import MeasureInput
from autosched.target import Target
from search_spaces import TemplateError, get_template
from tests.cuda_markers import needs_nvcc
from tests.task_helpers import (
    add_relu_task, attention_scores_task, conv_task, gemm_task, matmul_task, softmax_task, unary_task,
    viewed_attention_task,
)

SM80 = Target.parse("cuda -arch=sm_80")

TASKS = {
    "matmul_relu_odd": lambda: matmul_task((37, 29), (29, 51), relu=True),
    "gemm_dense_bias": lambda: gemm_task((64, 100), (70, 100), (70,), trans_b=1),
    "gemm_trans_a_alpha_beta": lambda: gemm_task((20, 33), (20, 12), (33, 12), trans_a=1, alpha=0.5, beta=2.0),
    "batched_attention": lambda: attention_scores_task((2, 3), 17, 8, 19),
    "attention_views": lambda: viewed_attention_task(9, 3, 8),
    "conv_bias_relu_odd": lambda: conv_task((1, 5, 13, 11), (7, 5, 3, 3), pad=1, bias=True, epilogue="relu"),
    "conv_stride2_residual": lambda: conv_task((2, 6, 9, 10), (4, 6, 3, 3), stride=2, pad=1, epilogue="residual"),
    "conv_depthwise": lambda: conv_task((1, 8, 12, 12), (8, 1, 3, 3), pad=1, group=8),
    "conv_grouped_1x1": lambda: conv_task((1, 6, 7, 7), (10, 3, 1, 1), group=2),
    "softmax": lambda: softmax_task((3, 5, 37)),
    "layer_norm": lambda: unary_task(Op.LAYER_NORM, (2, 7, 33), axis=2, epsilon=1e-5),
    "max_pool": lambda: unary_task(Op.MAX_POOL, (1, 3, 13, 11), kernel_shape=(3, 3), strides=(2, 2),
                                   pads=(1, 1, 1, 1), dilations=(1, 1), ceil_mode=0),
    "average_pool": lambda: unary_task(Op.AVERAGE_POOL, (2, 3, 9, 9), kernel_shape=(3, 3), strides=(2, 2),
                                       pads=(1, 1, 1, 1), dilations=(1, 1), ceil_mode=0, count_include_pad=0),
    "global_mean": lambda: unary_task(Op.REDUCE_MEAN, (1, 17, 7, 7), axes=(2, 3), keepdims=1),
    "transpose": lambda: unary_task(Op.TRANSPOSE, (3, 4, 5), perm=(2, 0, 1)),
    "add_relu_broadcast": lambda: add_relu_task((4, 33), (33,)),
}


def _configs(task, n_random: int, seed: int):
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    rng = np.random.default_rng(seed)
    return template, [template.fallback(task, SM80)] + [space.get(int(i)) for i in rng.integers(0, len(space), n_random)]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_emulated_template_matches_reference(name):
    task = TASKS[name]()
    template, configs = _configs(task, 2, seed=len(name))
    inputs = task.random_inputs(0)
    (want,) = task.reference(inputs)
    for config in configs:
        sched, args = template.apply(task, config, SM80)
        kernel = build_emulated_kernel(sched, args, "candidate")
        got = np.full(want.shape, np.nan, np.float32)
        kernel(*inputs, got)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} config {config.to_json()}")


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvcc_compiles_sampled_configs(tmp_path, arch):
    target = Target.parse(f"cuda -arch={arch}")
    inputs = []
    for name in ("gemm_dense_bias", "batched_attention", "conv_stride2_residual", "conv_depthwise", "softmax",
                 "max_pool"):
        task = TASKS[name]()
        _, configs = _configs(task, 1, seed=7)
        inputs += [MeasureInput(task, target, c) for c in configs]
    results = NvccBuilder(n_parallel=2, timeout=120, cache_dir=tmp_path).build(inputs)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]


def test_gpu_template_refuses_a_cpu_target():
    task = TASKS["gemm_dense_bias"]()
    with pytest.raises(TemplateError, match="not a GPU target"):
        get_template("Gemm", "cuda").space(task, Target.parse("llvm"))
