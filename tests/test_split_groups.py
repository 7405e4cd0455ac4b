"""Grouped 3x3 convolutions of wide groups run one convolution per group (`split_groups`): the
rewrite, where it stops, and the built model against onnxruntime on AVX2 and AVX-512."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from autosched.compile.evaluate import compare, onnxruntime_session, sample_inputs
from autosched.compile.model import build_model
from autosched.frontend.onnx import load_onnx
from autosched.graph.ir import Op
from autosched.graph.passes import fuse, optimize_for, split_groups
from autosched.graph.passes.aliases import find_aliases
from autosched.opset.conv import EXACT_SUMS_ATTR
from autosched.runtime import load_model
from tests.isa import ISAS, runs_here


def _grouped(tmp_path, channels=192, size=28, groups=3, stride=1, kernel=3):
    """A 1x1 convolution (as in RegNet's blocks: the grouped one's input is another kernel's
    output, not the model's), then the grouped convolution, ReLU and a sigmoid."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((channels, channels // groups, kernel, kernel)) * 0.05).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    w1 = (rng.standard_normal((channels, channels, 1, 1)) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["p"]),
             helper.make_node("Conv", ["p", "w", "b"], ["c"], group=groups, strides=[stride] * 2,
                              pads=[kernel // 2] * 4),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "grouped", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                               [1, channels, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("w1", w1))])
    path = tmp_path / "grouped.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_each_group_is_a_convolution_with_its_activations(tmp_path):
    graph = split_groups(load_onnx(_grouped(tmp_path)), 16)
    ops = [n.op for n in graph.nodes]
    assert ops.count(Op.CONV) == 4 and ops.count(Op.RELU) == 3 and ops.count(Op.SIGMOID) == 3
    assert ops[1] is Op.SPLIT and ops[-1] is Op.CONCAT and graph.nodes[-1].outputs[0] == "y"
    assert all(n.attrs["group"] == 1 for n in graph.nodes if n.op is Op.CONV)


@pytest.mark.parametrize("change", [dict(size=7), dict(groups=12), dict(stride=2), dict(kernel=1), "exact"])
def test_narrow_groups_small_maps_and_exact_sums_stay_grouped(tmp_path, change):
    """7x7 maps (where each group would run direct), 16-channel groups, strides, other kernels,
    and integer convolutions (which take no Winograd) keep their one grouped convolution."""
    graph = load_onnx(_grouped(tmp_path, **({} if change == "exact" else change)))
    if change == "exact":
        graph = graph.replace(nodes=tuple(dataclasses.replace(n, attrs={**n.attrs, EXACT_SUMS_ATTR: 1}) if n.op is Op.CONV else n
                                          for n in graph.nodes))
    assert split_groups(graph, 16) is graph


@pytest.mark.parametrize("isa", sorted(ISAS))
def test_split_groups_build_without_copies_and_match_onnxruntime(tmp_path, isa):
    """The split and the concat are the input's and the output's bytes: the kernels are the 1x1
    convolution, the three of the groups, each with its epilogue, and the layout conversions of
    the model's ends."""
    target = ISAS[isa][0]
    path = _grouped(tmp_path)
    graph = load_onnx(path)
    optimized = optimize_for(graph, target)
    free = find_aliases(optimized).free
    kernels = [g for g in fuse(optimized) if g.anchor.name not in free]
    assert [g.anchor.op for g in kernels] == [Op.LAYOUT_TRANSFORM] + [Op.CONV_NCHWC] * 4 + [Op.LAYOUT_TRANSFORM]
    assert all([n.op for n in g.epilogue] == [Op.RELU, Op.SIGMOID] for g in kernels[2:5])
    if not runs_here(target):
        pytest.skip(f"this host cannot run {isa} code")
    model = load_model(build_model(graph, tmp_path / "grouped.so", target).library)
    diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=1e-3, atol=1e-4)
    model.close()
    assert diffs and all(d.ok for d in diffs), diffs
