"""Channel padding: a convolution a few channels short of whole vectors computes whole vectors,
the padding rides through the channel-wise ops after it, and a Slice drops it before anything
else reads the value; results stay the plain graph's, on the reference and compiled."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, ops, same_results
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, pad_channels, plan_layout

RNG = np.random.default_rng(3)


def _conv(b, x, oc, k=1, group=1, name="conv"):
    c = b.values[x].shape[1]
    w = b.constant(f"{name}_w", (0.2 * RNG.standard_normal((oc, c // group, k, k))).astype(np.float32))
    bias = b.constant(f"{name}_b", RNG.standard_normal(oc).astype(np.float32))
    return b.node(Op.CONV, [x, w, bias], name=name, strides=(1, 1), pads=(k // 2,) * 4, dilations=(1, 1), group=group)


def classifier(oc=252):
    """A SqueezeNet-style head: conv, ReLU, per-channel scale and divisor, max pool, global
    mean, flatten. 252 channels: blocks of 4 only, whole vectors of 8 and 16 at 256."""
    b = GraphBuilder("head")
    x = b.input("x", (1, 16, 6, 6))
    y = b.node(Op.RELU, [_conv(b, x, oc, k=3)])
    y = b.node(Op.MUL, [y, b.constant("scale", RNG.standard_normal((oc, 1, 1)).astype(np.float32))])
    y = b.node(Op.DIV, [y, b.constant("divisor", (1 + RNG.random((1, oc, 1, 1))).astype(np.float32))])
    y = b.node(Op.MAX_POOL, [y], kernel_shape=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0), dilations=(1, 1),
               ceil_mode=0)
    y = b.node(Op.REDUCE_MEAN, [y], axes=(2, 3), keepdims=1)
    b.output(b.node(Op.RESHAPE, [y], shape=(1, oc)))
    return b.build()


def _conv_channels(graph):
    return [graph.values[n.outputs[0]].shape[1] for n in graph.nodes if n.op in (Op.CONV, Op.CONV_NCHWC)]


@pytest.mark.parametrize("lanes", [8, 16])
def test_the_padding_rides_to_the_global_mean_and_is_sliced_there(lanes):
    graph = optimize(classifier())
    padded = pad_channels(graph, lanes)
    assert _conv_channels(padded) == [256]
    assert ops(padded) == [Op.CONV, Op.RELU, Op.MUL, Op.DIV, Op.MAX_POOL, Op.REDUCE_MEAN, Op.SLICE, Op.RESHAPE]
    (cut,) = [n for n in padded.nodes if n.op is Op.SLICE]
    assert padded.values[cut.inputs[0]].shape == (1, 256, 1, 1) and padded.values[cut.outputs[0]].shape == (1, 252, 1, 1)
    divisor = next(n for n in padded.nodes if n.op is Op.DIV).inputs[1]
    assert np.all(padded.constants[divisor] >= 1)  # padded by the last value: no zero divisor in the padding
    same_results(graph, padded)
    planned = plan_layout(padded, lanes)
    assert {n.attrs["out_block"] for n in planned.nodes if n.op is Op.CONV_NCHWC} == {lanes}
    same_results(graph, planned)


def _branches():
    """A padded conv whose value a residual add reads (another tensor: the padding stops before
    it), and one whose value has two readers and is a graph output."""
    b = GraphBuilder("branches")
    x = b.input("x", (1, 8, 5, 5))
    a = b.node(Op.RELU, [_conv(b, x, 252, name="a")])
    side = b.node(Op.SIGMOID, [_conv(b, x, 252, name="side")])
    s = b.node(Op.ADD, [a, side])
    c = _conv(b, s, 124, name="c")
    b.output(b.node(Op.TANH, [c]), b.node(Op.EXP, [c]), c)
    return b.build()


def test_no_padding_where_it_would_be_sliced_off_at_full_size():
    """The padding would stop before the Add (another tensor) and at c (three readers, an
    output), on tensors as large as the convolutions' outputs: slicing them there costs a copy
    and conversions of the whole tensor, so none of the three is padded."""
    graph = optimize(_branches())
    assert pad_channels(graph, 8) is graph


def test_convolutions_that_fill_vectors_or_would_waste_too_much_are_left_alone():
    b = GraphBuilder("left")
    x = b.input("x", (1, 16, 4, 4))
    y = _conv(b, _conv(b, x, 256, name="whole"), 24, name="wasteful")  # 24 -> 32 on 16 lanes: a quarter padding
    b.output(_conv(b, y, 24, k=3, group=24, name="depthwise"))
    graph = optimize(b.build())
    assert pad_channels(graph, 16) is graph


def _head(oc=9, ic=32):
    """A super-resolution head: a 3x3 convolution to `oc` channels (fewer than a vector), then
    tanh, as the model's output."""
    b = GraphBuilder("sr_head")
    x = b.input("x", (1, ic, 12, 12))
    b.output(b.node(Op.TANH, [_conv(b, b.node(Op.RELU, [_conv(b, x, ic, k=3, name="body")]), oc, k=3)]))
    return b.build()


@pytest.mark.parametrize("lanes, oc", [(8, 5), (16, 9)])
def test_a_head_of_fewer_channels_than_a_vector_computes_one_vector(lanes, oc):
    """Its plain convolution ran at 36 GFLOP/s (ESPCN's 32 -> 9 channel head, 2.4 ms); padded
    to one vector, it runs as a blocked one, and the slice of the small output costs little."""
    graph = optimize(_head(oc))
    padded = pad_channels(graph, lanes)
    assert _conv_channels(padded) == [32, lanes]
    assert ops(padded)[-2:] == [Op.TANH, Op.SLICE]
    same_results(graph, padded)
    narrow = optimize(_head(oc, ic=lanes // 2))
    assert pad_channels(narrow, lanes) is narrow


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_padded_head_builds_and_matches_the_reference(target, tmp_path):
    built_matches_reference(_head(oc=3), tmp_path / "head.so", target, seed=2, atol=1e-5)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_padded_build_matches_the_reference(target, tmp_path):
    manifest = built_matches_reference(classifier(), tmp_path / "head.so", target, seed=2, atol=1e-5)
    convs = [t["key"] for t in manifest["tasks"] if '"op":"ConvNCHWc"' in t["key"]]
    assert len(convs) == 1 and "[256,16,3,3]" in convs[0]
