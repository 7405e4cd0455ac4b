"""Layout planning: the planned graph computes what the plain one does, converts layouts only
where it must, and compiles to models that match the numpy reference on each ISA."""
from collections import Counter

import numpy as np
import pytest
from graph_helpers import aspp_graph, built_matches_reference
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.layout import convert, to_blocked, to_plain
from autosched.graph.passes import optimize, optimize_for, plan_layout
from autosched.graph.passes.layout import channel_block
from autosched.graph.reference import random_inputs, run_graph

RNG = np.random.default_rng(7)


def _conv(b, x, oc, k=3, stride=1, group=1, name=None):
    c = b.values[x].shape[1]
    w = b.constant(f"{name}_w", (0.2 * RNG.standard_normal((oc, c // group, k, k))).astype(np.float32))
    bias = b.constant(f"{name}_b", RNG.standard_normal(oc).astype(np.float32))
    return b.node(Op.CONV, [x, w, bias], name=name, strides=(stride, stride), pads=(k // 2,) * 4, dilations=(1, 1),
                  group=group)


def cnn():
    """A bit of everything layout planning meets: a plain 3-channel input, a pool, residual adds,
    a depthwise conv, a block change (24 → 32 channels: blocks of 8, then of 16 on AVX-512), a
    concat, a per-channel constant, a squeeze-excite gate, a global mean, a reshape, and a
    blocked value that is also a graph output."""
    b = GraphBuilder("cnn")
    x = b.input("x", (1, 3, 18, 18))
    a = b.node(Op.RELU, [_conv(b, x, 16, stride=2, name="stem")])
    p = b.node(Op.MAX_POOL, [a], kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1),
               ceil_mode=0)
    r = b.node(Op.ADD, [b.node(Op.RELU, [_conv(b, p, 16, name="c1")]), p])
    d = b.node(Op.CLIP, [_conv(b, r, 16, group=16, name="dw")], min=0.0, max=6.0)
    e = _conv(b, d, 24, k=1, name="expand24")
    f = _conv(b, e, 32, k=1, name="to32")
    cat = b.node(Op.CONCAT, [f, _conv(b, r, 16, k=1, name="side")], axis=1)
    scaled = b.node(Op.MUL, [cat, b.constant("gamma", RNG.standard_normal((48, 1, 1)).astype(np.float32))])
    avg = b.node(Op.AVERAGE_POOL, [scaled], kernel_shape=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1),
                 ceil_mode=0, count_include_pad=0)
    se = b.node(Op.SIGMOID, [_conv(b, b.node(Op.REDUCE_MEAN, [avg], axes=(2, 3), keepdims=1), 48, k=1, name="se")])
    gated = b.node(Op.MUL, [avg, se])
    flat = b.node(Op.RESHAPE, [b.node(Op.REDUCE_MEAN, [gated], axes=(2, 3), keepdims=1)], shape=(1, 48))
    b.output(flat, gated)
    return b.build()


def _planned(graph, lanes):
    """(the optimized graph, its layout planned for `lanes`), having checked that both compute
    the same outputs on the numpy reference."""
    graph = optimize(graph)
    planned = plan_layout(graph, lanes)
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(planned, feeds)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
    return graph, planned


@pytest.mark.parametrize("lanes", [16, 8])
def test_planned_graph_matches_the_plain_one(lanes):
    graph, planned = _planned(cnn(), lanes)
    ops = Counter(n.op for n in planned.nodes)
    assert ops[Op.CONV] == 0 and ops[Op.CONV_NCHWC] == 7
    # conversions only before the Reshape and for the graph output `gated`: where the block
    # changes (24 → 32 channels, blocks of 8 then 16 on AVX-512) the convolution reads one block
    # and writes the other
    transforms = [n for n in planned.nodes if n.op is Op.LAYOUT_TRANSFORM]
    reshape = next(n for n in graph.nodes if n.op is Op.RESHAPE)
    assert sorted(n.outputs[0] for n in transforms) == sorted([reshape.inputs[0], graph.outputs[1].name]), \
        [(n.name, dict(n.attrs)) for n in transforms]
    assert {v.name: v.shape for v in planned.outputs} == {v.name: v.shape for v in graph.outputs}


def test_blocks_follow_the_channel_count():
    assert [channel_block(c, 16) for c in (3, 24, 32, 48, 96, 1280)] == [0, 8, 16, 16, 16, 16]
    assert [channel_block(c, 8) for c in (3, 12, 24, 6)] == [0, 4, 8, 0]


def test_numpy_conversions_round_trip():
    x = RNG.standard_normal((2, 48, 5, 3)).astype(np.float32)
    blocked = to_blocked(x, 16)
    assert blocked.shape == (2, 3, 5, 3, 16) and blocked[1, 2, 4, 1, 5] == x[1, 2 * 16 + 5, 4, 1]
    assert np.array_equal(to_plain(blocked, 16), x)
    assert np.array_equal(convert(blocked, 16, 8), to_blocked(x, 8))


def test_graphs_without_convolutions_are_left_alone():
    b = GraphBuilder()
    y = b.node(Op.RELU, [b.node(Op.MAX_POOL, [b.input("x", (1, 16, 8, 8))], kernel_shape=(2, 2), strides=(2, 2),
                                pads=(0, 0, 0, 0), dilations=(1, 1), ceil_mode=0)])
    b.output(y)
    graph = b.build()
    assert plan_layout(graph, 16) is graph


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_compiled_planned_model_matches_the_reference(target, tmp_path):
    """The build plans the layout for its target (blocks of 8 on AVX2, 16 on AVX-512) and runs
    every blocked kernel: convolutions, depthwise, pools, reductions, conversions; the concat of
    blocks is no kernel (its inputs written in place, `graph/passes/aliases.py`)."""
    manifest = built_matches_reference(cnn(), tmp_path / "cnn.so", target)
    ops = {t["key"].split('"op":"')[1].split('"')[0] for t in manifest["tasks"]}
    assert {"ConvNCHWc", "MaxPool", "AveragePool", "LayoutTransform"} <= ops and "Concat" not in ops


def _resnext(size=8):
    """Two grouped bottlenecks: 32 groups of 4 channels (width 128), then of 8 (width 256)."""
    b = GraphBuilder("resnext")
    x = b.input("x", (1, 64, size, size))
    for name, width, cout, stride in (("a", 128, 128, 1), ("b", 256, 256, 2)):
        y = b.node(Op.RELU, [_conv(b, x, width, k=1, name=f"{name}1")])
        y = b.node(Op.RELU, [_conv(b, y, width, stride=stride, group=32, name=f"{name}2")])
        x = b.node(Op.RELU, [_conv(b, y, cout, k=1, name=f"{name}3")])
    b.output(x)
    return b.build()


@pytest.mark.parametrize("lanes", [8, 16])
def test_grouped_convolutions_keep_whole_vector_blocks(lanes):
    """Groups of 4 and 8 channels run in the vector's blocks: several groups per block (each
    block of output channels reads its own block of input channels), or whole blocks of one
    group (8 on AVX2). The ReLU after each keeps its block and the next 1×1 convolution reads it
    as it is, so the only conversions are the 64-channel input's into blocks and the output's."""
    blocks, transforms = [lanes] * 6, 2
    graph = optimize(_resnext())
    planned = plan_layout(graph, lanes)
    convs = [n for n in planned.nodes if n.op is Op.CONV_NCHWC]
    assert [n.attrs["out_block"] for n in convs] == blocks
    assert not any(n.op is Op.CONV for n in planned.nodes)
    assert sum(n.op is Op.LAYOUT_TRANSFORM for n in planned.nodes) == transforms
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(planned, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_groups_that_cut_through_every_block_stay_plain():
    b = GraphBuilder()
    x = b.input("x", (1, 12, 6, 6))
    b.output(_conv(b, x, 12, group=4, name="g"))  # groups of 3 channels: no block of 4 or more holds them
    assert not any(n.op is Op.CONV_NCHWC for n in plan_layout(b.build(), 8).nodes)


@pytest.mark.parametrize("lanes", [8, 16])
def test_groups_in_blocks_that_do_not_divide_the_channels_take_narrower_blocks(lanes):
    """RegNet's 104 channels in 13 groups of 8: a vector of 16 holds two whole groups but 16
    does not divide 104, so the convolution runs in blocks of 8 (it crashed the planner)."""
    b = GraphBuilder()
    x = b.input("x", (1, 104, 6, 6))
    b.output(b.node(Op.RELU, [_conv(b, x, 104, group=13, name="g")]))
    graph = b.build()
    planned = plan_layout(graph, lanes)
    assert [n.attrs["out_block"] for n in planned.nodes if n.op is Op.CONV_NCHWC] == [8]
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(planned, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_a_depthwise_convolution_keeps_the_usual_blocks_or_none():
    """The narrow blocks are for groups of several channels: a depthwise convolution on 12
    channels (no block of 8 or 16 divides them) stays plain, as it did."""
    b = GraphBuilder()
    b.output(_conv(b, b.input("x", (1, 12, 6, 6)), 12, group=12, name="dw"))
    assert not any(n.op is Op.CONV_NCHWC for n in plan_layout(b.build(), 16).nodes)


def _inception_se(pool_first: bool = False):
    """Where a network's block starts from a plain tensor of many channels (its input), an
    inception branch pools that input (before or after the convolution that reads it too, in
    the graph's order), and a squeeze-excitation gate computes its scales through a Gemm and a
    Reshape (a plain tensor of one value per channel)."""
    b = GraphBuilder("inception_se")
    x = b.input("x", (1, 32, 10, 10))

    def pool():
        return b.node(Op.AVERAGE_POOL, [x], kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1),
                      dilations=(1, 1), ceil_mode=0, count_include_pad=0)

    pooled = pool() if pool_first else None
    left = b.node(Op.RELU, [_conv(b, x, 32, k=1, name="b1")])
    pooled = pooled or pool()
    right = b.node(Op.RELU, [_conv(b, pooled, 32, k=1, name="b2")])
    cat = b.node(Op.CONCAT, [left, right], axis=1)
    squeezed = b.node(Op.RESHAPE, [b.node(Op.REDUCE_MEAN, [cat], axes=(2, 3), keepdims=1)], shape=(1, 64))
    fc = b.constant("fc_w", (0.2 * RNG.standard_normal((64, 64))).astype(np.float32))
    scales = b.node(Op.SIGMOID, [b.node(Op.GEMM, [squeezed, fc], alpha=1.0, beta=1.0, transA=0, transB=1)])
    gated = b.node(Op.MUL, [cat, b.node(Op.RESHAPE, [scales], shape=(1, 64, 1, 1))])
    b.output(_conv(b, gated, 32, name="out"))
    return b.build()


@pytest.mark.parametrize("pool_first", [False, True], ids=["conv_first", "pool_first"])
@pytest.mark.parametrize("lanes", [16, 8])
def test_plain_wide_inputs_pools_and_channel_gates_stay_in_blocks(lanes, pool_first):
    """The 32-channel input is converted once and every reader takes the blocked copy (its
    1x1 convolution, and the average pool, whichever comes first: plain, it ran 0.211 ms
    against 0.044 blocked in an inception block of 192 channels at 28x28 on a Xeon, and 0.237
    against 0.026 on a Zen 4 where the pool came first); the gate's per-channel scales are
    converted into blocks, so the gated tensor never leaves them (a squeeze-excitation block's
    second convolution read a plain input and ran 2.2x slower). Only the Reshape's input goes
    back to plain, and the output."""
    graph = optimize(_inception_se(pool_first))
    planned = plan_layout(graph, lanes)
    transforms = [(n.inputs[0].split("@")[0], n.attrs["dst_block"]) for n in planned.nodes
                  if n.op is Op.LAYOUT_TRANSFORM]
    assert ("x", lanes) in transforms and len([t for t in transforms if t[0] == "x"]) == 1
    reshape = next(n for n in graph.nodes if n.op is Op.RESHAPE)
    assert sorted(v for v, dst in transforms if dst == 0) == sorted([reshape.inputs[0], graph.outputs[0].name])
    pool = next(n for n in planned.nodes if n.op is Op.AVERAGE_POOL)
    assert pool.attrs["block"] == lanes
    assert all(n.attrs["in_block"] == lanes for n in planned.nodes if n.op is Op.CONV_NCHWC)
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(planned, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_compiled_gates_and_converted_inputs_match_the_reference(target, tmp_path):
    built_matches_reference(_inception_se(pool_first=True), tmp_path / "inception_se.so", target)


@pytest.mark.parametrize("lanes", [16, 8])
def test_splits_of_blocked_channels_stay_in_blocks(lanes):
    """A convolution's output split along channels into parts of whole blocks (an Inception
    block's merged 1x1 convolutions, split back into their branches) is split along the
    channel-block axis; a split that cuts a block goes through the plain layout."""
    for sizes, blocked in (((16, 32, 16), True), ((8, 56), lanes == 8)):
        b = GraphBuilder("split")
        y = _conv(b, b.input("x", (1, 16, 6, 6)), 64, k=1, name="merged")
        b.node(Op.SPLIT, [y], name="split", outputs=len(sizes), axis=1, split=sizes)
        b.output(*(_conv(b, f"split:{i}", 16, name=f"c{i}") for i in range(len(sizes))))
        graph = optimize(b.build())
        planned = plan_layout(graph, lanes)
        split = next(n for n in planned.nodes if n.op is Op.SPLIT)
        assert (split.attrs["split"] == tuple(s // lanes for s in sizes)) is blocked
        assert any(n.op is Op.LAYOUT_TRANSFORM and n.attrs["dst_block"] == 0 for n in planned.nodes
                   if n.outputs[0] == split.inputs[0]) is not blocked
        feeds = random_inputs(graph.inputs, 0)
        want, got = run_graph(graph, feeds), run_graph(planned, feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def _upsampling_onnx(path, upsampled_output=False):
    """conv -> nearest 2x (asymmetric, floor) -> conv -> bilinear 2x (half_pixel) -> conv, as an
    FPN or a U-Net decoder upsamples; with `upsampled_output`, a nearest 2x of the last conv is
    the output (a YOLO neck's, a segmentation head's)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes, x = [], [], "x"
    for i, (cin, cout) in enumerate(((16, 32), (32, 32), (32, 16))):
        inits.append(numpy_helper.from_array((0.2 * RNG.standard_normal((cout, cin, 3, 3))).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        x = f"c{i}"
        if i < 2 or upsampled_output:
            inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), f"s{i}"))
            mode = ("linear", "half_pixel") if i == 1 else ("nearest", "asymmetric")
            nodes.append(helper.make_node("Resize", [x, "", f"s{i}"], [f"r{i}"], mode=mode[0],
                                          coordinate_transformation_mode=mode[1], nearest_mode="floor"))
            x = f"r{i}"
    side = (40, 48) if upsampled_output else (20, 24)
    graph = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 5, 6])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16, *side])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_resizes_of_blocked_tensors_stay_in_blocks(target, tmp_path):
    """Between two convolutions a Resize of the spatial axes reads the blocks as they are: no
    conversion on either side (an FPN's top-down path ran at 0.49 of onnxruntime's time, Xeon, 2
    threads), and the build matches the reference."""
    from autosched.frontend.onnx import load_onnx

    graph = load_onnx(_upsampling_onnx(tmp_path / "up.onnx"))
    planned = optimize_for(graph, target)
    assert [n.op for n in planned.nodes].count(Op.RESIZE) == 2
    assert all("@nchw" in n.inputs[0] for n in planned.nodes if n.op is Op.RESIZE)  # the blocked copies
    transforms = [n for n in planned.nodes if n.op is Op.LAYOUT_TRANSFORM]
    assert len(transforms) == 2  # the input's into blocks, the output's back
    built_matches_reference(graph, tmp_path / "up.so", target)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_an_upsampled_output_is_converted_before_its_resize(target, tmp_path):
    """A Resize whose result is only the graph's output reads its input converted to plain, a
    quarter of the bytes a conversion of its 2x result would move (a CSP neck's last upsampling:
    0.26 -> 0.23 ms with the conversion, 1.02x the neck, EPYC Zen 5); the Resizes between
    convolutions stay in blocks."""
    from autosched.frontend.onnx import load_onnx

    graph = load_onnx(_upsampling_onnx(tmp_path / "up.onnx", upsampled_output=True))
    planned = optimize_for(graph, target)
    resizes = [n for n in planned.nodes if n.op is Op.RESIZE]
    assert ["@nchw" in n.inputs[0] for n in resizes] == [True, True, False]
    producer = {out: n for n in planned.nodes for out in n.outputs}
    assert producer[resizes[-1].inputs[0]].op is Op.LAYOUT_TRANSFORM
    assert resizes[-1].outputs[0] == planned.outputs[0].name
    built_matches_reference(graph, tmp_path / "up.so", target)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_regions_of_a_convolution_stay_in_blocks(target, tmp_path):
    """The spatial slices each region of a cut convolution reads and the concats of the regions
    along the width and the height run on the blocked tensors: no conversion to plain and back
    (DeepLab's ASPP block converted its 256-channel input to plain, 0.13 ms, and each region's
    slice back to blocks: 1.06x onnxruntime's time, 0.87x without, EPYC Zen 5, 1 thread), and
    each region's Relu is its kernel's epilogue. (The slices then become the windows the regions
    read in place: `test_graph_conv_windows.py`.)"""
    graph = aspp_graph()
    planned = optimize_for(graph, target)
    transforms = [n for n in planned.nodes if n.op is Op.LAYOUT_TRANSFORM]
    assert [(n.attrs["src_block"], n.attrs["dst_block"]) for n in transforms] == [(0, target.layout_lanes),
                                                                                 (target.layout_lanes, 0)]
    moves = [n for n in planned.nodes if n.op in (Op.SLICE, Op.CONCAT) and n.name != "cat"]
    assert moves and all(len(planned.values[n.outputs[0]].shape) == 5 for n in moves)
    assert {n.attrs["axis"] for n in moves if n.op is Op.CONCAT} == {2, 3}
    concatenated = {n.outputs[0] for n in planned.nodes if n.op is Op.CONCAT}
    assert not any(n.op is Op.RELU and n.inputs[0] in concatenated for n in planned.nodes)
    built_matches_reference(graph, tmp_path / "aspp.so", target)


@pytest.mark.parametrize("lanes", [16, 8])
def test_batch_concats_and_splits_of_blocked_tensors_stay_in_blocks(lanes):
    """Two branches' maps concatenated along the batch, activated once and split back (what a
    substitution that batches two branches' activations makes) stay blocked."""
    b = GraphBuilder("batched")
    x = b.input("x", (1, 16, 6, 6))
    cat = b.node(Op.CONCAT, [_conv(b, x, 16, name="a"), _conv(b, x, 16, name="b")], axis=0)
    b.node(Op.SPLIT, [b.node(Op.RELU, [cat])], name="split", outputs=2, axis=0, split=(1, 1))
    b.output(*(_conv(b, f"split:{i}", 16, name=f"c{i}") for i in range(2)))
    graph = optimize(b.build())
    planned = plan_layout(graph, lanes)
    assert [n.op for n in planned.nodes].count(Op.LAYOUT_TRANSFORM) == 3  # the input in, two outputs back
    split = next(n for n in planned.nodes if n.op is Op.SPLIT)
    assert split.attrs["split"] == (1, 1) and len(planned.values[split.inputs[0]].shape) == 5
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(planned, feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lanes", [16, 8])
def test_a_narrow_plain_input_of_a_pointwise_convolution_is_read_as_it_is(lanes):
    """A 1x1 convolution reads a plain input of fewer than two vectors of channels as it is (an
    EfficientNet-style block's 24-channel input on AVX-512: the conversion to blocks of 8 had
    cost 0.011 of its 0.49 ms); a 3x3 convolution, or a wider input, is still converted."""
    for k, c in ((1, 24), (3, 24), (1, 32)):
        b = GraphBuilder("narrow")
        b.output(b.node(Op.RELU, [_conv(b, b.input("x", (1, c, 8, 8)), 32, k=k, name="expand")]))
        graph = optimize(b.build())
        planned = plan_layout(graph, lanes)
        conv = next(n for n in planned.nodes if n.op is Op.CONV_NCHWC)
        plain = k == 1 and c < 2 * lanes
        assert (conv.attrs["in_block"] == 0) is plain and (conv.inputs[0] == "x") is plain
        feeds = random_inputs(graph.inputs, 0)
        np.testing.assert_allclose(run_graph(planned, feeds)[graph.outputs[0].name],
                                   run_graph(graph, feeds)[graph.outputs[0].name], rtol=1e-5, atol=1e-5)


def _group_norm_onnx(path, groups, channels=64, size=12):
    """Conv, a GroupNorm as torch exports it (Reshape, InstanceNormalization, Reshape, per-channel
    Mul and Add), PoolFormer's token mixer (an average pool minus its input, scaled, added back),
    then a 1x1 conv."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32 if np.asarray(array).dtype.kind == "f" else np.int64),
                                       name)
    inits = [const("w1", 0.2 * RNG.standard_normal((channels, 3, 3, 3))),
             const("w2", 0.2 * RNG.standard_normal((channels, channels, 1, 1))),
             const("grouped", [1, groups, -1]), const("back", [1, channels, size, size]),
             const("ones", np.ones(groups)), const("zeros", np.zeros(groups)),
             const("gamma", RNG.standard_normal((channels, 1, 1))), const("beta", RNG.standard_normal((channels, 1, 1))),
             const("scale", RNG.standard_normal((channels, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "grouped"], ["g"]),
             helper.make_node("InstanceNormalization", ["g", "ones", "zeros"], ["n"], epsilon=1e-5),
             helper.make_node("Reshape", ["n", "back"], ["u"]),
             helper.make_node("Mul", ["u", "gamma"], ["m"]),
             helper.make_node("Add", ["m", "beta"], ["gn"]),
             helper.make_node("AveragePool", ["gn"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              count_include_pad=0),
             helper.make_node("Sub", ["p", "gn"], ["d"]),
             helper.make_node("Mul", ["scale", "d"], ["s"]),
             helper.make_node("Add", ["c", "s"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "group_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   (1, 3, size, size))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, channels, size, size))],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
@pytest.mark.parametrize("groups", [1, 2, 8])
def test_a_group_norm_of_whole_channel_blocks_stays_in_blocks(target, groups, tmp_path):
    """Where each group is whole channel blocks, the group norm's reshapes are views of the blocked
    tensor that keep each group's elements (in another order, which its statistics, scale and
    shift ignore): the norm, the pool, the scales and the residual add between the convolutions
    run on the blocks, only the input and output converted (PoolFormer-S12 1.10x faster, 190 ->
    130 kernels). Groups that cut through blocks (8 channels in blocks of 16) convert."""
    from autosched.frontend.onnx import load_onnx

    graph = load_onnx(_group_norm_onnx(tmp_path / "gn.onnx", groups))
    planned = optimize_for(graph, target)
    whole = (64 // groups) % channel_block(64, target.layout_lanes) == 0
    transforms = [n for n in planned.nodes if n.op is Op.LAYOUT_TRANSFORM]
    assert (len(transforms) == 1) == whole  # the output's conversion back (the input's 3 channels stay plain)
    pool = next(n for n in planned.nodes if n.op is Op.AVERAGE_POOL)
    assert ("block" in pool.attrs) == whole
    built_matches_reference(graph, tmp_path / "gn.so", target)


def _normalized_by_range():
    """Two convolutions with what a dynamically quantized model computes between them: the
    range of the first's output (ReduceMax and ReduceMin over every axis to one value each) and
    the output shifted and scaled by those run-time scalars."""
    b = GraphBuilder("range")
    c1 = _conv(b, b.input("x", (1, 16, 10, 10)), 16, name="c1")
    hi, lo = (b.node(op, [c1], axes=(0, 1, 2, 3), keepdims=0) for op in (Op.REDUCE_MAX, Op.REDUCE_MIN))
    y = b.node(Op.DIV, [b.node(Op.SUB, [c1, lo]), b.node(Op.SUB, [hi, lo])])
    b.output(_conv(b, b.node(Op.RELU, [y]), 16, name="c2"))
    return b.build()


@pytest.mark.parametrize("lanes", [16, 8])
def test_full_reductions_and_run_time_scalars_keep_blocks(lanes):
    _, planned = _planned(_normalized_by_range(), lanes)
    # the input converted once, the output back once: nothing in between
    assert [n.attrs["dst_block"] for n in planned.nodes if n.op is Op.LAYOUT_TRANSFORM] == [lanes, 0]


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_compiled_full_reductions_of_blocks_match_the_reference(target, tmp_path):
    manifest = built_matches_reference(_normalized_by_range(), tmp_path / "range.so", target)
    assert [c["op"] for c in manifest["calls"]].count("LayoutTransform") == 2
