"""Dilated 3x3 convolutions over their input's phases: the rewrite, where it applies, and that
builds compute what the dilated convolution does (numpy reference; onnxruntime through the
zoo's dilated block in the model tests)."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results, transposes
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for
from autosched.task import extract_tasks
from autosched.templates import get_template

RNG = np.random.default_rng(3)


def _dilated(c=64, hw=16, d=2, pads=None, k=3, residual=False):
    """A dilated convolution with a bias and a ReLU (and, with `residual`, a residual Add
    before the ReLU), then an ordinary 3x3 convolution."""
    b = GraphBuilder("dilated")
    x = b.input("x", (1, c, hw, hw))
    w = b.constant("w", (0.1 * RNG.standard_normal((c, c, k, k))).astype(np.float32))
    bias = b.constant("b", RNG.standard_normal(c).astype(np.float32))
    pad = d * (k // 2) if pads is None else pads
    y = b.node(Op.CONV, [x, w, bias], name="dil", strides=(1, 1), pads=(pad,) * 4, dilations=(d, d), group=1)
    if residual:
        y = b.node(Op.ADD, [y, x], name="res")
    y = b.node(Op.RELU, [y], name="act")
    w2 = b.constant("w2", (0.1 * RNG.standard_normal((c, c, 3, 3))).astype(np.float32))
    b.output(b.node(Op.CONV, [y, w2], name="next", strides=(1, 1), pads=(1,) * 4, dilations=(1, 1), group=1))
    return b.build()


def _phased(graph):
    return [n for n in graph.nodes if n.op is Op.CONV_NCHWC and n.name == "dil"]


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_dilated_convolution_runs_over_its_phases_with_its_epilogue(lanes):
    graph = _dilated()
    planned = optimize(graph, lanes)
    (conv,) = _phased(planned)
    assert conv.attrs["dilations"] == (1, 1) and conv.attrs["pads"] == (1, 1, 1, 1)
    assert planned.values[conv.inputs[0]].shape == (4, 64 // lanes, 8, 8, lanes)  # 2x2 phases on the batch
    relu = next(n for n in planned.nodes if n.op is Op.RELU)
    assert relu.inputs == conv.outputs  # the epilogue moved onto the phases: still the kernel's
    assert len(transposes(planned)) == 2
    assert Op.LAYOUT_TRANSFORM not in [n.op for n in planned.nodes if n.name.startswith("dil/")]
    same_results(graph, planned)


@pytest.mark.parametrize("case", [
    dict(pads=1),  # not "same": the phases would mix
    dict(hw=15),  # the dilation does not divide the image
    dict(c=16),  # too few channels for Winograd: the direct kernel is at the peak already
    dict(hw=14),  # phases of 7x7, below Winograd's 8x8
    dict(k=5),  # not 3x3
    dict(d=1),  # not dilated
])
def test_where_winograd_would_not_take_the_phases_the_convolution_stays(case):
    planned = optimize(_dilated(**case), 16)
    assert all(n.attrs.get("dilations") == (case.get("d", 2),) * 2 for n in planned.nodes if n.name == "dil")
    assert transposes(planned) == []


def test_a_residual_add_stays_after_the_phases_are_put_back():
    """An Add of another tensor does not commute with moving pixels: the chain stops before it."""
    graph = _dilated(residual=True)
    planned = optimize(graph, 16)
    (conv,) = _phased(planned)
    add = next(n for n in planned.nodes if n.op is Op.ADD)
    assert conv.outputs[0] not in add.inputs and planned.values[add.outputs[0]].shape[0] == 1
    same_results(graph, planned)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_matches_the_dilated_convolution_and_its_fallback_is_winograd(target, tmp_path):
    graph = _dilated()
    built_matches_reference(graph, tmp_path / "dilated.so", target)
    tasks = extract_tasks(optimize_for(graph, target)).tasks
    task = next(t for t in tasks if t.op == "ConvNCHWc" and t.shapes[0][0] == 4)
    assert get_template("ConvNCHWc", "llvm").fallback(task, target)["algorithm"] != "direct"
