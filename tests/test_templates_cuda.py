"""GPU templates: every one correct in the CPU emulation against the task's numpy reference for
random configs and odd sizes, and compiled by nvcc for sm_80 and sm_90 (no GPU is used)."""

import numpy as np
import pytest

from autosched.compile.emulation import build_emulated_kernel
from autosched.graph.ir import Op
from autosched.lower import lower
from autosched.lower.ir import Allocate, walk_stmts
from autosched.measure.gpu_build import lower_for_gpu
from autosched.measure.local import instantiate_from_template
from autosched.measure.nvcc import NvccBuilder
from autosched.measure.record import ErrorKind, MeasureInput
from autosched.target import Target
from autosched.templates import TemplateError, get_template
from tests.cuda_markers import needs_nvcc
from tests.task_helpers import (
    add_relu_task,
    attention_scores_task,
    conv_task,
    gemm_task,
    matmul_task,
    multi_output_task,
    softmax_task,
    unary_task,
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


def _check_emulated(name: str, task, configs, atol: float = 1e-4) -> None:
    """Each config's kernel in the emulation, every output against the task's numpy reference."""
    template = get_template(task.op, "cuda")
    inputs = task.random_inputs(0)
    want = task.reference(inputs)
    for config in configs:
        sched, args = template.apply(task, config, SM80)
        got = [np.full(w.shape, np.nan, np.float32) for w in want]
        build_emulated_kernel(sched, args, "candidate")(*inputs, *got)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol, err_msg=f"{name} config {config.to_json()}")


@pytest.mark.parametrize("name", sorted(TASKS))
def test_emulated_template_matches_reference(name):
    task = TASKS[name]()
    _check_emulated(name, task, _configs(task, 2, seed=len(name))[1])


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", pytest.param("sm_90", marks=pytest.mark.slow)])  # 14-15 s each
def test_nvcc_compiles_sampled_configs(tmp_path, arch):
    target = Target.parse(f"cuda -arch={arch}")
    inputs = []
    for name in ("gemm_dense_bias", "batched_attention", "conv_stride2_residual", "conv_depthwise", "softmax",
                 "max_pool"):
        task = TASKS[name]()
        _, configs = _configs(task, 1, seed=7)
        inputs += [MeasureInput(task, target, c) for c in configs]
    for name in ("softmax_bert", "layer_norm_odd"):
        task = ROW_OPS[name]()
        inputs += [MeasureInput(task, target, c) for c in _block_rows_configs(task, seed=7)]
    inputs += [MeasureInput(task, target, c) for task in (MULTI_OUTPUT["layer_norm_mean_inv_std"](),)
               for c in _block_rows_configs(task, seed=3)]
    for name in ("3x3_stride2_residual", "1x1_stride2_bias"):
        task = GEMM_CONVS[name]()
        inputs += [MeasureInput(task, target, c) for c in _implicit_gemm_configs(task, 2, seed=7)]
    results = NvccBuilder(n_parallel=2, timeout=120, cache_dir=tmp_path).build(inputs)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]


@needs_nvcc
def test_implicit_gemm_beyond_the_device_is_a_resource_limit(tmp_path):
    """1024 threads × 4 pixels by 16 input channels of a 3×3 window: a 2.3 MB im2col tile."""
    task = conv_task((1, 16, 64, 64), (8, 16, 3, 3), pad=1)
    config = _implicit_gemm(task, threads_w=32, threads_h=32, tile_w=4, tile_ic=16)
    [result] = NvccBuilder(n_parallel=1, cache_dir=tmp_path).build([MeasureInput(task, SM80, config)])
    assert result.error_kind is ErrorKind.RESOURCE_LIMIT and "shared memory exceed sm_80" in result.error_msg


#: groups = 1 convolutions the implicit GEMM takes: odd maps, stride 2 with padding, 1×1, 3×3, 5×3
GEMM_CONVS = {
    "3x3_pad_bias_relu": lambda: conv_task((1, 5, 13, 11), (7, 5, 3, 3), pad=1, bias=True, epilogue="relu"),
    "3x3_stride2_residual": lambda: conv_task((2, 6, 9, 10), (4, 6, 3, 3), stride=2, pad=1, epilogue="residual"),
    "1x1": lambda: conv_task((2, 9, 7, 5), (11, 9, 1, 1)),
    "1x1_stride2_bias": lambda: conv_task((1, 6, 11, 9), (5, 6, 1, 1), stride=2, bias=True),
    "5x3_pad2": lambda: conv_task((1, 3, 10, 9), (6, 3, 5, 3), pad=2),
}


def _implicit_gemm(task, index: int = 0, **knobs):
    """Config `index` of the conv template's space with the implicit-GEMM algorithm and `knobs`."""
    space = get_template("Conv", "cuda").space(task, SM80)
    config = space.get(index)
    return space.from_values({**{k.name: config[k.name] for k in space.knobs}, "algorithm": "implicit_gemm", **knobs})


def _implicit_gemm_configs(task, n: int, seed: int) -> list:
    """`n` random configs of the conv template's space with the implicit-GEMM algorithm."""
    size = len(get_template("Conv", "cuda").space(task, SM80))
    return [_implicit_gemm(task, int(i)) for i in np.random.default_rng(seed).integers(0, size, n)]


def test_implicit_gemm_conv_matches_reference_for_random_configs():
    for name, make in sorted(GEMM_CONVS.items()):
        task = make()
        _check_emulated(name, task, _implicit_gemm_configs(task, 4, seed=len(name)))  # 20 in all


def test_the_tuner_chooses_the_conv_algorithm_and_grouped_convs_stay_direct():
    template = get_template("Conv", "cuda")
    spaces = {name: template.space(TASKS[name](), SM80) for name in ("conv_stride2_residual", "conv_depthwise")}
    assert spaces["conv_stride2_residual"].knob("algorithm").values == ("direct", "implicit_gemm")
    assert spaces["conv_depthwise"].knob("algorithm").values == ("direct",)
    assert template.fallback(GEMM_CONVS["1x1"](), SM80)["algorithm"] == "implicit_gemm"
    assert template.fallback(GEMM_CONVS["3x3_pad_bias_relu"](), SM80)["algorithm"] == "direct"


def test_implicit_gemm_keeps_registers_and_shared_tiles_to_the_block():
    """The GEMM's output columns are the fused (row, column) pixels: each thread's accumulator is
    its tile_c × tile_w registers and the im2col tile one K step × the block's pixels, not the
    bounding box of whole output rows."""
    task = GEMM_CONVS["3x3_pad_bias_relu"]()
    config = _implicit_gemm(task, threads_w=4, threads_h=2, threads_c=2, tile_w=2, tile_c=2, tile_ic=2,
                            double_buffer=0)
    sched, args = get_template("Conv", "cuda").apply(task, config, SM80)
    shapes = {s.buffer.name: s.buffer.shape for s in walk_stmts(lower(sched, args, "conv").body)
              if isinstance(s, Allocate)}
    assert shapes == {"implicit_gemm": (1, 2, 2), "im2col_shared": (1, 18, 16), "weight_rows_shared": (4, 18)}


#: row-wise ops whose rows a block reduces together: odd rows, BERT's 768 and 3072, a global mean,
#: reductions that are the op's output (a global max, odd rows summed)
ROW_OPS = {
    "softmax_odd": lambda: softmax_task((3, 5, 37)),
    "softmax_bert": lambda: softmax_task((2, 768)),
    "layer_norm_odd": lambda: unary_task(Op.LAYER_NORM, (2, 7, 33), axis=2, epsilon=1e-5),
    "layer_norm_bert_ffn": lambda: unary_task(Op.LAYER_NORM, (3, 3072), axis=1, epsilon=1e-5),
    "global_mean": lambda: unary_task(Op.REDUCE_MEAN, (1, 17, 7, 7), axes=(2, 3), keepdims=1),
    "global_max": lambda: unary_task(Op.REDUCE_MAX, (1, 17, 7, 7), axes=(2, 3), keepdims=1),
    "row_sum_odd": lambda: unary_task(Op.REDUCE_SUM, (3, 2, 101), axes=(2,), keepdims=1),
    "row_max_dropped": lambda: unary_task(Op.REDUCE_MAX, (3, 10, 37), axes=(2,), keepdims=0),
    "vector_sum": lambda: unary_task(Op.REDUCE_SUM, (5, 70), axes=(1,), keepdims=0),
}


def _block_rows_configs(task, seed: int) -> list:
    """The fallback and two random thread counts, each a block a row, through shared memory
    alone and with warp shuffles."""
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    threads = np.random.default_rng(seed).choice(space.knob("threads").values, 2)
    return [template.fallback(task, SM80)] + [
        space.from_values({"threads": int(t), "per_thread": 1, "row_reduce": way})
        for t in threads for way in ("block", "shuffle")]


@pytest.mark.parametrize("name", ["row_max_dropped", "vector_sum"])
def test_reductions_whose_elements_are_rows_match_reference_every_way(name):
    """An output that is itself a reduction, its reduced axes dropped: each element is a row,
    whichever way the rows go (a row's block spans the output's elements, not its last axis)."""
    task = ROW_OPS[name]()
    space = get_template(task.op, "cuda").space(task, SM80)
    _check_emulated(name, task, [space.from_values({"threads": 32, "per_thread": 2, "row_reduce": way})
                                 for way in space.knob("row_reduce").values], atol=1e-5)


@pytest.mark.parametrize("name", sorted(ROW_OPS))
def test_a_block_a_row_matches_reference(name):
    """Every reduction inside the op as a shared-memory tree between barriers, or with warp
    shuffles for its levels within a warp (the emulation reports a barrier some threads miss,
    tree reads outside their level and a shuffle some lanes of its group miss)."""
    task = ROW_OPS[name]()
    _check_emulated(name, task, _block_rows_configs(task, seed=len(name)), atol=1e-5)


def test_rows_of_a_warp_or_more_get_a_block_each_by_default():
    """Threads a row up to the row's length (a power of two, 32 to 256); reductions shorter than
    a warp computed for each output by its thread, not a whole row of outputs by one thread (an
    LRN's channel window: 32 threads for 32768 outputs)."""
    softmax = get_template("Softmax", "cuda")
    picks = {shape: (c["row_reduce"], c["threads"]) for shape in ((2, 768), (1, 12, 128, 128), (3, 5, 37), (64, 31))
             for c in [softmax.fallback(softmax_task(shape), SM80)]}
    assert picks == {(2, 768): ("shuffle", 256), (1, 12, 128, 128): ("shuffle", 128), (3, 5, 37): ("shuffle", 32),
                     (64, 31): ("output", 256)}
    window = unary_task(Op.AVERAGE_POOL, (1, 1, 32, 1024), kernel_shape=(5, 1), strides=(1, 1), pads=(2, 0, 2, 0),
                        dilations=(1, 1), ceil_mode=0, count_include_pad=1)
    config = get_template(window.op, "cuda").fallback(window, SM80)
    _, geometry = lower_for_gpu(MeasureInput(window, SM80, config), instantiate_from_template)
    assert config["row_reduce"] == "output" and geometry.grid == (128, 1, 1) and geometry.block == (256, 1, 1)
    for task in (TASKS["max_pool"](), unary_task(Op.REDUCE_SUM, (4, 128, 96), axes=(0,), keepdims=0)):
        # the output reduces windows or columns shorter than a warp: no block a row
        assert "row_reduce" not in {k.name for k in get_template(task.op, "cuda").space(task, SM80).knobs}
    for keepdims in (1, 0):  # a block for each output element, whether the reduced axis is kept or not
        row_max = unary_task(Op.REDUCE_MAX, (4, 128, 1000), axes=(2,), keepdims=keepdims)
        config = get_template(row_max.op, "cuda").fallback(row_max, SM80)
        assert config["row_reduce"] == "shuffle"
        _, geometry = lower_for_gpu(MeasureInput(row_max, SM80, config), instantiate_from_template)
        assert geometry.grid == (512, 1, 1) and geometry.block == (256, 1, 1)


MULTI_OUTPUT = {
    "split_3": lambda: multi_output_task(Op.SPLIT, (4, 10, 3), 3, axis=1, split=(2, 5, 3)),
    "layer_norm_mean_inv_std": lambda: multi_output_task(Op.LAYER_NORM, (3, 5, 40), 3, axis=2, epsilon=1e-5),
    "layer_norm_bert_mean": lambda: multi_output_task(Op.LAYER_NORM, (2, 768), 2, axis=1, epsilon=1e-5),
}


@pytest.mark.parametrize("name", sorted(MULTI_OUTPUT))
def test_multi_output_ops_match_reference(name):
    """Every output written by one kernel, for the fallback and every row_reduce way."""
    task = MULTI_OUTPUT[name]()
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    configs = [template.fallback(task, SM80)] + [space.get(int(i)) for i in space.sample(3, np.random.default_rng(1))]
    _check_emulated(name, task, configs, atol=1e-5)


def test_gpu_template_refuses_a_cpu_target():
    task = TASKS["gemm_dense_bias"]()
    with pytest.raises(TemplateError, match="not a GPU target"):
        get_template("Gemm", "cuda").space(task, Target.parse("llvm"))


@pytest.mark.parametrize("a, b, tile, threads", [
    ((4096, 4096), (4096, 4096), (64, 64), 256),  # 4096 blocks: the textbook tile
    ((128, 768), (768, 3072), (64, 64), 256),  # BERT's FFN up: 96 blocks already
    ((128, 3072), (3072, 768), (32, 32), 128),  # BERT's FFN down: 24 blocks of 64 × 64 left 108 of 132 SMs idle
    ((1, 512), (512, 1000), (1, 64), 16),  # a row: threads_y clamped to 1, no smaller blocks
])
def test_the_fp32_matmul_fallback_fills_the_grid(a, b, tile, threads):
    # on an H200 the FFN-down GEMM's 64 × 64 fallback ran 3.9× slower than FFN-up's of the same
    # FLOPs (benchmarks/gpu.py --parts kernels): 24 blocks busy 24 multiprocessors
    task = matmul_task(a, b)
    config = get_template("MatMul", "cuda").fallback(task, SM80)
    assert (config["threads_y"] * config["tile_m"], config["threads_x"] * config["tile_n"]) == tile
    assert config["threads_x"] * config["threads_y"] == threads


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("task", [matmul_task((37, 29), (29, 51), relu=True), gemm_task((64, 100), (70, 100), (70,), trans_b=1),
                                  attention_scores_task((2, 3), 17, 8, 19)], ids=["odd_relu", "gemm_trans_b", "batched"])
def test_the_fp32_matmul_fills_its_tiles_by_a_cp_async_pipeline(task, stages):
    """double_buffer 2 and 3 on sm_80+: the shared tiles by cp.async, `stages` deep. The emulation holds
    each copy until the wait that retires it, so a pipeline that reads a tile too early sees NaN."""
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    knobs = template.fallback(task, SM80).to_json()["knobs"]
    for vec in (1, 4):
        config = space.from_values({**knobs, "double_buffer": stages, "vec": vec})
        sched, args = template.apply(task, config, SM80)
        inputs = task.random_inputs(0)
        want = task.reference(inputs)
        got = [np.full(w.shape, np.nan, np.float32) for w in want]
        build_emulated_kernel(sched, args, "pipelined")(*inputs, *got)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
    assert space.knob("double_buffer").values == (0, 1, 2, 3)
    assert template.space(task, Target.parse("cuda -arch=sm_75")).knob("double_buffer").values == (0, 1)


@pytest.mark.parametrize("algorithm", ["direct", "implicit_gemm"])
def test_the_fp32_conv_fills_its_tiles_by_a_cp_async_pipeline(algorithm):
    task = conv_task((2, 6, 9, 10), (4, 6, 3, 3), stride=2, pad=1, epilogue="residual")
    template = get_template(task.op, "cuda")
    space = template.space(task, SM80)
    knobs = template.fallback(task, SM80).to_json()["knobs"]
    for stages, vec in ((2, 1), (3, 4)):
        config = space.from_values({**knobs, "double_buffer": stages, "vec": vec, "algorithm": algorithm})
        sched, args = template.apply(task, config, SM80)
        inputs = task.random_inputs(0)
        [want] = task.reference(inputs)
        got = np.full(want.shape, np.nan, np.float32)
        build_emulated_kernel(sched, args, "pipelined")(*inputs, got)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def test_grouped_implicit_gemm_matches_reference_for_configs_within_a_group():
    """Split-K's parts (2 groups of 32 channels) as an fp32 implicit GEMM batched over the groups:
    configs whose blocks fit a group match numpy, the others are refused by name."""
    task = conv_task((2, 32, 7, 6), (64, 16, 3, 3), pad=1, group=2, bias=True, epilogue="relu")
    configs = _implicit_gemm_configs(task, 24, seed=2)
    fitting = [c for c in configs if 32 % (c["threads_c"] * c["tile_c"]) == 0]
    assert len(fitting) >= 3
    _check_emulated("grouped implicit GEMM", task, fitting[:4])
    straddling = next(c for c in configs if c not in fitting)
    with pytest.raises(TemplateError, match="straddle"):
        get_template("Conv", "cuda").apply(task, straddling, SM80)
