"""Warp-shuffle reductions: the CPU emulation exchanges registers between the lanes of a warp in
lockstep as a GPU does (checked against numpy), reports a shuffle some lanes of its group never
reach, and nvcc turns the row-reduction template's shuffles into SHFL instructions."""
import numpy as np
import pytest

from autosched import te
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.nvcc import compile_cuda
from autosched.codegen.sass import kernel_sass
from autosched.compile.emulation import build_emulated_kernel
from autosched.graph.ir import Op
from autosched.lower import lower
from autosched.runtime.module import KernelError
from autosched.schedule import create_schedule
from autosched.target import Target
from autosched.templates import get_template
from search_spaces.cuda.row_reduce import warp_allreduce
from tests.cuda_markers import ARCHS, needs_nvcc
from tests.task_helpers import softmax_task, unary_task


def _warp_kernel(threads: int, combiner: str, width: int):
    x = te.placeholder((threads,), name="x")
    y = te.compute((threads,), lambda i: warp_allreduce(x[i], combiner, width, x[0], x[threads - 1]), name="y")
    s = create_schedule(y)
    s[y].bind(s[y].op.axes[0], "threadIdx.x")
    return s, [x, y]


@pytest.mark.parametrize("combiner, width", [("sum", 32), ("max", 32), ("min", 8), ("sum", 2)])
def test_every_lane_gets_its_groups_reduction(combiner, width):
    x = np.random.default_rng(width).standard_normal(64).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    build_emulated_kernel(*_warp_kernel(64, combiner, width), "warp")(x, y)
    groups = {"sum": np.sum, "max": np.max, "min": np.min}[combiner](x.reshape(-1, width), axis=1)
    np.testing.assert_allclose(y, np.repeat(groups, width), rtol=1e-6)


def test_a_shuffle_some_lanes_never_reach_is_reported():
    # 48 threads: the second warp's 32-lane group has only 16 lanes, which would wait forever
    x, y = np.ones(48, np.float32), np.zeros(48, np.float32)
    with pytest.raises(KernelError, match="warp shuffle of a 32-lane group .* not every lane of the group reaches"):
        build_emulated_kernel(*_warp_kernel(48, "sum", 32), "warp")(x, y)


SM80 = Target.parse("cuda -arch=sm_80")
ROWS = {"softmax_bert": lambda: softmax_task((4, 768)),
        "layer_norm_bert": lambda: unary_task(Op.LAYER_NORM, (4, 768), axis=1, epsilon=1e-5)}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_fallback_of_long_rows_shuffles(name):
    task = ROWS[name]()
    template = get_template(task.op, "cuda")
    config = template.fallback(task, SM80)
    assert config["row_reduce"] == "shuffle" and config["threads"] == 256
    sched, args = template.apply(task, config, SM80)
    code = CudaRenderer().render(lower(sched, args, "row"))
    assert "__shfl_xor_sync" in code
    inputs = task.random_inputs(0)
    got = [np.full(w.shape, np.nan, np.float32) for w in task.reference(inputs)]
    build_emulated_kernel(sched, args, "row")(*inputs, *got)
    for g, w in zip(got, task.reference(inputs)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", sorted(ROWS))
def test_shuffles_are_shfl_instructions(tmp_path, arch, name):
    """Per reduction: 5 butterfly steps within each warp and 3 across the 8 warps of 256 threads;
    fewer barriers than the shared-memory tree, and no spills."""
    target = Target.parse(f"cuda -arch={arch}")
    task = ROWS[name]()
    template = get_template(task.op, "cuda")
    space = template.space(task, target)
    sass = {}
    for way in ("block", "shuffle"):
        sched, args = template.apply(task, space.from_values({"threads": 256, "per_thread": 1, "row_reduce": way}),
                                     target)
        built = compile_cuda(CudaRenderer().render(lower(sched, args, "row")), arch, cache_dir=tmp_path)
        sass[way] = kernel_sass(built.path, "row")
        assert sass[way].spills == 0 and built.usage["row"].spill_stores == 0
    reductions = 2  # Softmax: max and sum; LayerNorm: mean and variance
    assert sass["block"].count("SHFL") == 0
    assert sass["shuffle"].count("SHFL") >= reductions * (5 + 3)
    assert sass["shuffle"].count("BAR") < sass["block"].count("BAR")
