"""Blocked 1x1 convolutions of stride 1 over their image as one row: which ones, what moves with
them (their epilogue, residual Adds), that no kernel is added or cut off its epilogue, that the
results are the same (numpy reference, and a real build), and the one-row fallback tile."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results
from isa import AVX2, AVX512, RUN_TARGETS
from task_helpers import blocked_conv_task

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import flatten_pointwise, fuse, optimize, optimize_for
from autosched.task import extract_tasks
from autosched.templates import get_template
from search_spaces.llvm.conv2d import OUTER_ORDERS, shifted_columns

RNG = np.random.default_rng(11)


def _conv(b, x, c, oc, k=1, stride=1, pad=0, group=1, name=None):
    w = b.constant(f"{name}_w", (0.1 * RNG.standard_normal((oc, c // group, k, k))).astype(np.float32))
    bias = b.constant(f"{name}_b", RNG.standard_normal(oc).astype(np.float32))
    return b.node(Op.CONV, [x, w, bias], name=name, strides=(stride,) * 2, pads=(pad,) * 4, dilations=(1, 1),
                  group=group)


def _bottlenecks(blocks=2, c=32, mid=16, hw=14, batch=1):
    """ResNet-50's bottleneck blocks, identity residuals: 1x1 down, 3x3, 1x1 up, Add, Relu."""
    b = GraphBuilder("bottlenecks")
    x = b.input("x", (batch, c, hw, hw))
    for i in range(blocks):
        y = b.node(Op.RELU, [_conv(b, x, c, mid, name=f"b{i}.reduce")])
        y = b.node(Op.RELU, [_conv(b, y, mid, mid, k=3, pad=1, name=f"b{i}.conv")])
        x = b.node(Op.RELU, [b.node(Op.ADD, [_conv(b, y, mid, c, name=f"b{i}.expand"), x], name=f"b{i}.add")],
                   name=f"b{i}.out")
    b.output(x)
    return b.build()


def _one_conv(c=32, oc=32, hw=14, after=None, **conv):
    """A 1x1 (or `conv`) convolution between two 3x3 ones, so that its input and output are
    blocked intermediates; `after` ("concat", "rows") is what reads its result."""
    b = GraphBuilder("one")
    x = b.node(Op.RELU, [_conv(b, b.input("x", (1, c, hw, hw)), c, c, k=3, pad=1, name="first")])
    y = _conv(b, x, c, oc, name="conv", **conv)
    if after == "concat":
        y = b.node(Op.CONCAT, [y, x], axis=1)
    elif after == "rows":  # a per-row scale: along the image, it does not read the same as one row
        y = b.node(Op.MUL, [y, b.constant("scale", RNG.standard_normal((1, 1, hw, 1)).astype(np.float32))])
    b.output(_conv(b, y, b.values[y].shape[1], 16, k=3, pad=1, name="last"))
    return b.build()


def _shape(graph, node_name, which=0):
    (node,) = [n for n in graph.nodes if n.name == node_name]
    return graph.values[node.outputs[which]].shape


def test_the_bottlenecks_pointwise_convolutions_and_their_epilogues_run_as_one_row():
    graph = _bottlenecks()
    rows, images = optimize_for(graph, AVX2), optimize(graph, 8)
    for i in range(2):
        for name in (f"b{i}.reduce", f"b{i}.expand", f"b{i}.add", f"b{i}.out"):
            assert _shape(rows, name) == (1, 2 if name.endswith("reduce") else 4, 1, 196, 8), name
        assert _shape(rows, f"b{i}.conv") == (1, 2, 14, 14, 8)  # the 3x3 keeps its rows
    # the next block's 1x1 reads the row result itself, not a view back and forth
    (reduce,) = [n for n in rows.nodes if n.name == "b1.reduce"]
    assert any(n.name == "b0.out" and n.outputs[0] == reduce.inputs[0] for n in rows.nodes)
    # as many kernels, each with the same epilogue: the Reshapes are views
    assert [(g.anchor.name, [n.op for n in g.epilogue]) for g in fuse(rows)] == \
        [(g.anchor.name, [n.op for n in g.epilogue]) for g in fuse(images)]
    same_results(graph, rows)


def test_a_batch_of_images_is_a_batch_of_rows():
    graph = _bottlenecks(batch=3, hw=7)
    rows = optimize_for(graph, AVX2)
    assert _shape(rows, "b1.out") == (3, 4, 1, 49, 8)
    same_results(graph, rows)


def test_32_vector_registers_keep_the_image():
    rows = optimize_for(_bottlenecks(), AVX512)
    assert all(len(v.shape) != 5 or v.shape[2] > 1 for v in rows.values.values())


@pytest.mark.parametrize("case", [
    dict(stride=2),  # strided: each output pixel reads every other input pixel
    dict(pad=1),  # padded: the border reads zeros
    dict(oc=24),  # three blocks: not the fallback's two-block tile
    dict(group=4),  # grouped
    dict(after="concat"),  # the Concat would have to copy a view instead of taking it in place
    dict(after="rows"),  # the Mul would leave the kernel's epilogue
])
def test_where_one_row_would_not_pay_the_convolution_keeps_its_image(case):
    graph = _one_conv(**case)
    planned = optimize(graph, 8, pointwise_rows=True)
    assert _shape(planned, "conv")[2] > 1
    same_results(graph, planned)


def test_a_pointwise_convolution_between_two_others_runs_as_one_row():
    graph = _one_conv()
    planned = optimize(graph, 8, pointwise_rows=True)
    assert _shape(planned, "conv") == (1, 4, 1, 196, 8)
    assert flatten_pointwise(planned, 8) is planned  # nothing left to flatten
    same_results(graph, planned)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_of_the_bottlenecks_matches_the_reference(target, tmp_path):
    built_matches_reference(_bottlenecks(), tmp_path / "bottlenecks.so", target)


def test_the_one_row_tasks_fallback_is_two_blocks_by_six_columns_all_tiles_parallel():
    tasks = extract_tasks(optimize_for(_bottlenecks(hw=56), AVX2)).tasks
    template = get_template("ConvNCHWc", "llvm")
    pointwise = [t for t in tasks if t.op == "ConvNCHWc" and tuple(t.shapes[1][2:]) == (1, 1)]
    assert pointwise and all(t.out_shapes[0][2:4] == (1, 3136) for t in pointwise)
    for task in pointwise:
        config = template.fallback(task, AVX2)
        assert (config["tile_oc"], config["tile_ow"], config["parallel_depth"]) == (2, (523, 6), 4)


@pytest.mark.parametrize("c, oc, order", [
    (1024, 256, OUTER_ORDERS[2]),  # more input channels than output: the columns outermost
    (1024, 1024, OUTER_ORDERS[2]),  # a block tile's weights (64 KiB) beyond L1
    (256, 1024, OUTER_ORDERS[0]),  # 16 KiB of weights a block tile: the blocks outermost
    (512, 512, OUTER_ORDERS[0]),
])
def test_a_one_row_pointwise_fallback_puts_outermost_what_streams_better(c, oc, order):
    task = blocked_conv_task((1, c, 1, 196), (oc, c, 1, 1), 8, 8, bias=True)
    assert get_template("ConvNCHWc", "llvm").fallback(task, AVX2)["outer_order"] == order


def test_one_row_tiles_may_shift_where_an_image_keeps_its_divisors():
    assert shifted_columns(1, 3136) and not shifted_columns(56, 56)
    assert shifted_columns(13, 13)  # no divisor from 4 to 8: shifted whatever the rows
    assert not shifted_columns(1, 7)  # one tile holds the row
