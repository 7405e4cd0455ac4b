"""Kernel taps that read only padding, dropped (`graph/passes/crop_taps.py`): DeepLab's ASPP
branches, where they apply and where not, and that the result is the same on random shapes
(numpy reference; onnxruntime through exported DeepLab-v3 models, checked by hand)."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import crop_taps


def _conv(hw=(21, 21), c=8, oc=8, k=(3, 3), stride=(1, 1), dilation=(24, 24), pads=None, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    b = GraphBuilder("conv")
    x = b.input("x", (1, c, *hw))
    ins = [x, b.constant("w", rng.standard_normal((oc, c, *k)).astype(np.float32))]
    if bias:
        ins.append(b.constant("b", rng.standard_normal(oc).astype(np.float32)))
    if pads is None:  # "same"
        pads = (dilation[0] * (k[0] // 2), dilation[1] * (k[1] // 2)) * 2
    b.output(b.node(Op.CONV, ins, name="aspp", strides=stride, pads=pads, dilations=dilation, group=1))
    return b.build()


def _the_conv(graph):
    (node,) = [n for n in graph.nodes if n.op is Op.CONV]
    return node, graph.constants[node.inputs[1]]


@pytest.mark.parametrize("dilation", [24, 36])
def test_an_aspp_branch_wider_than_its_map_is_a_pointwise_convolution(dilation):
    graph = _conv(dilation=(dilation, dilation))
    cropped = crop_taps(graph)
    node, w = _the_conv(cropped)
    assert w.shape == (8, 8, 1, 1) and node.attrs["pads"] == (0, 0, 0, 0) and node.attrs["dilations"] == (1, 1)
    np.testing.assert_array_equal(w[:, :, 0, 0], graph.constants["w"][:, :, 1, 1])
    same_results(graph, cropped)


def test_one_axis_cropped_the_other_kept():
    graph = _conv(hw=(12, 20), dilation=(2, 30))
    node, w = _the_conv(crop_taps(graph))
    assert w.shape[2:] == (3, 1) and node.attrs["dilations"] == (2, 1) and node.attrs["pads"] == (2, 0, 2, 0)
    same_results(graph, crop_taps(graph))


@pytest.mark.parametrize("case", [
    dict(dilation=(1, 1)),  # "same" padding: 1-2% of the work at the borders
    dict(hw=(7, 7), dilation=(1, 1)),  # 18% at the borders of 7x7: not worth 9 kernels
    dict(hw=(3, 3), k=(3, 3), dilation=(1, 1), pads=(0, 0, 0, 0)),  # a valid convolution
    dict(hw=(7, 7), k=(7, 7), dilation=(1, 1)),  # ConvNeXt's last stage: 57% live, but in 7 x 7 regions
])
def test_convolutions_reading_the_image_through_most_taps_stay(case):
    graph = _conv(**case)
    assert crop_taps(graph) is graph


def test_where_few_taps_read_the_image_the_regions_are_convolutions_of_their_own():
    """Dilation 12 on 21x21: rows 0-8 read taps 1-2, rows 9-11 tap 1, rows 12-20 taps 0-1 (38%
    of the work is live); 3 x 3 regions, each an unpadded convolution of its taps over the
    slice it reads, concatenated back."""
    graph = _conv(dilation=(12, 12))
    cut = crop_taps(graph)
    convs = [n for n in cut.nodes if n.op is Op.CONV]
    assert len(convs) == 9 and all(n.attrs["pads"] == (0, 0, 0, 0) for n in convs)
    kernels = sorted(cut.constants[n.inputs[1]].shape[2:] for n in convs)
    assert kernels == sorted([(2, 2), (2, 1), (2, 2), (1, 2), (1, 1), (1, 2), (2, 2), (2, 1), (2, 2)])
    macs = sum(np.prod(cut.values[n.outputs[0]].shape[2:]) * np.prod(cut.constants[n.inputs[1]].shape[2:])
               for n in convs)
    assert macs == (9 * 2 + 3 + 9 * 2) ** 2  # the live taps only
    assert [n.attrs["axis"] for n in cut.nodes if n.op is Op.CONCAT] == [3, 3, 3, 2]
    same_results(graph, cut)


def test_random_convolutions_compute_the_same_after_cropping():
    """Shapes, strides, dilations and asymmetric pads (up to a kernel's span) drawn at random,
    many with dead taps: wherever the pass rewrote one, cropped or cut into regions, the result
    equals the original's."""
    rng = np.random.default_rng(7)
    cropped = cut = 0
    for seed in range(80):
        k = tuple(int(v) for v in rng.integers(1, 6, 2))
        dilation = tuple(int(v) for v in rng.integers(1, 13, 2))
        stride = tuple(int(v) for v in rng.integers(1, 4, 2))
        pads = tuple(int(rng.integers(0, dilation[a % 2] * (k[a % 2] - 1) + 1)) for a in range(4))
        hw = tuple(int(v) for v in rng.integers(1, 25, 2))
        if min(hw[a] + pads[a] + pads[a + 2] - dilation[a] * (k[a] - 1) for a in range(2)) < 1:  # no output
            continue
        graph = _conv(hw=hw, c=3, oc=4, k=k, stride=stride, dilation=dilation, pads=pads, bias=bool(seed % 2),
                      seed=seed)
        rewritten = crop_taps(graph)
        if rewritten is not graph:
            regions = any(n.op is Op.CONCAT for n in rewritten.nodes)
            cropped, cut = cropped + (not regions), cut + regions
            same_results(graph, rewritten, seed)
    assert cropped >= 8 and cut >= 15


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_of_an_aspp_module_matches_the_reference(target, tmp_path):
    """DeepLab-v3's ASPP at 21x21: a 1x1 branch and 3x3 branches of dilation 12 (kept), 24 and
    36 (pointwise after cropping), concatenated and projected."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("aspp")
    x = b.input("x", (1, 32, 21, 21))
    branches = []
    for i, d in enumerate((1, 12, 24, 36)):
        k = 1 if d == 1 else 3
        w = b.constant(f"w{i}", (0.1 * rng.standard_normal((16, 32, k, k))).astype(np.float32))
        y = b.node(Op.CONV, [x, w], name=f"branch{i}", strides=(1, 1), pads=(d * (k // 2),) * 4,
                   dilations=(d, d), group=1)
        branches.append(b.node(Op.RELU, [y], name=f"relu{i}"))
    cat = b.node(Op.CONCAT, branches, name="cat", axis=1)
    w = b.constant("wp", (0.1 * rng.standard_normal((16, 64, 1, 1))).astype(np.float32))
    b.output(b.node(Op.CONV, [cat, w], name="project", strides=(1, 1), pads=(0,) * 4, dilations=(1, 1), group=1))
    built_matches_reference(b.build(), tmp_path / "aspp.so", target)


def _activated(activation, operand=None, also_output=False):
    """The dilation-12 convolution on 21x21 followed by `activation` (with a constant `operand`)."""
    graph = _conv(dilation=(12, 12))
    b = GraphBuilder("activated")
    x = b.input("x", (1, 8, 21, 21))
    for name, array in graph.constants.items():
        b.constant(name, array)
    (conv,) = graph.nodes
    y = b.node(Op.CONV, [x, *conv.inputs[1:]], name="aspp", **conv.attrs)
    inputs = [y] + ([b.constant("k", operand)] if operand is not None else [])
    b.output(b.node(activation, inputs, name="act"), *([y] if also_output else []))
    return b.build()


@pytest.mark.parametrize("activation, operand, moves", [
    (Op.RELU, None, True),
    (Op.PRELU, np.linspace(0.1, 0.8, 8, dtype=np.float32).reshape(8, 1, 1), True),  # per channel
    (Op.MUL, np.float32(0.5).reshape(()), True),  # a scalar
    (Op.ADD, np.arange(21, dtype=np.float32), False),  # varies along the width
])
def test_an_activation_reading_the_regions_alone_runs_in_each(activation, operand, moves):
    """An activation is applied to each region before the concat, where fusion makes it the
    region kernel's epilogue (a DeepLab ASPP branch's Relu ran as a kernel of its own over the
    concatenated map), where it does the same there as over the whole map."""
    graph = _activated(activation, operand)
    cut = crop_taps(graph)
    acts = [n for n in cut.nodes if n.op is activation]
    producers = {out: n for n in cut.nodes for out in n.outputs}
    if moves:
        assert len(acts) == 9 and all(producers[n.inputs[0]].op is Op.CONV for n in acts)
        assert producers[cut.outputs[0].name].op is Op.CONCAT
    else:
        assert len(acts) == 1 and producers[acts[0].inputs[0]].op is Op.CONCAT
    same_results(graph, cut)


def test_an_activation_stays_where_the_convolution_is_read_elsewhere():
    graph = _activated(Op.RELU, also_output=True)
    cut = crop_taps(graph)
    (act,) = [n for n in cut.nodes if n.op is Op.RELU]
    assert act.inputs[0] == cut.outputs[1].name  # the regions' concat, which is an output too
    same_results(graph, cut)
