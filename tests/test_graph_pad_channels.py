"""Channel padding: a convolution a few channels short of whole vectors computes whole vectors,
the padding rides through the channel-wise ops after it (depthwise convolutions and adds of two
padded values among them), a dense convolution reading it absorbs it, and a Slice drops it
before anything else reads the value; results stay the plain graph's, on the reference and
compiled."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, ops, same_results
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for, pad_channels, plan_layout
from autosched.graph.passes.pad_channels import FULL_WIDTH_WASTE, max_waste
from autosched.target import CpuCapabilities, CpuInfo, Target

ZEN5_CORES = CpuCapabilities(64, 32, "x86_64-avx512", frozenset({"avx512f"}), (), vendor="amd", core="znver5")
ZEN4_CORES = CpuCapabilities(64, 32, "x86_64-avx512", frozenset({"avx512f"}), (), vendor="amd", core="znver4")

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
    # the division by a constant is a multiplication by its reciprocal (`divide_by_constant`)
    assert ops(padded) == [Op.CONV, Op.RELU, Op.MUL, Op.MUL, Op.MAX_POOL, Op.REDUCE_MEAN, Op.SLICE, Op.RESHAPE]
    (cut,) = [n for n in padded.nodes if n.op is Op.SLICE]
    assert padded.values[cut.inputs[0]].shape == (1, 256, 1, 1) and padded.values[cut.outputs[0]].shape == (1, 252, 1, 1)
    reciprocal = [n for n in padded.nodes if n.op is Op.MUL][1].inputs[1]
    assert np.all((padded.constants[reciprocal] > 0) & (padded.constants[reciprocal] <= 1))  # padded by the last value
    same_results(graph, padded)
    planned = plan_layout(padded, lanes)
    assert {n.attrs["out_block"] for n in planned.nodes if n.op is Op.CONV_NCHWC} == {lanes}
    same_results(graph, planned)


def _branches():
    """Two padded convolutions whose values a residual-style add joins, read by a third one
    padded too, whose value has three readers and is a graph output."""
    b = GraphBuilder("branches")
    x = b.input("x", (1, 8, 5, 5))
    a = b.node(Op.RELU, [_conv(b, x, 252, name="a")])
    side = b.node(Op.SIGMOID, [_conv(b, x, 252, name="side")])
    s = b.node(Op.ADD, [a, side])
    c = _conv(b, s, 124, name="c")
    b.output(b.node(Op.TANH, [c]), b.node(Op.EXP, [c]), c)
    return b.build()


def test_the_padding_rides_through_an_add_of_two_padded_values_into_the_next_convolution():
    """a and side are padded together (the Add joins their padding), c reads the sum with zero
    filter columns for the padding and is padded itself; only the graph outputs are sliced."""
    graph = optimize(_branches())
    padded = pad_channels(graph, 8)
    assert _conv_channels(padded) == [256, 256, 128]
    c = next(n for n in padded.nodes if n.name == "c")
    assert padded.values[c.inputs[1]].shape == (128, 256, 1, 1)
    assert [padded.values[n.inputs[0]].shape[1] for n in padded.nodes if n.op is Op.SLICE] == [128, 128, 128]
    assert ops(padded)[:4] == [Op.CONV, Op.RELU, Op.CONV, Op.SIGMOID]
    same_results(graph, padded)


def _sliced(ic, after=Op.TRANSPOSE):
    """A convolution from `ic` channels to 252, then `after` (which mixes channels or can leave
    non-finite values in padding), then a dense 1x1 convolution to 256 channels."""
    b = GraphBuilder("sliced")
    y = _conv(b, b.input("x", (1, ic, 6, 6)), 252, name="seed")
    y = b.node(Op.TRANSPOSE, [y], perm=(0, 1, 3, 2)) if after is Op.TRANSPOSE else b.node(after, [y])
    b.output(_conv(b, y, 256, name="next"))
    return b.build()


def test_padding_is_sliced_before_an_op_that_mixes_channels_only_where_the_slice_is_cheap():
    """A Transpose reads the padded value through a Slice of the whole tensor: one copy per
    element, against 8 multiply-adds per element of an 8-channel input's convolution (refused)
    or 32 of a 32-channel one (padded)."""
    cheap = optimize(_sliced(8))
    assert pad_channels(cheap, 8) is cheap
    graph = optimize(_sliced(32))
    padded = pad_channels(graph, 8)
    assert ops(padded) == [Op.CONV, Op.SLICE, Op.TRANSPOSE, Op.CONV] and _conv_channels(padded) == [256, 256]
    same_results(graph, padded)


@pytest.mark.parametrize("op, absorbed", [(Op.RELU, True), (Op.EXP, False)])
def test_a_convolution_absorbs_padding_only_where_it_holds_finite_values(op, absorbed):
    """Zero filter columns times the padded channels add zeros only if those are finite: after
    an Exp they may not be (exp of a large bias), so the next convolution reads a Slice."""
    graph = optimize(_sliced(32, op))
    padded = pad_channels(graph, 8)
    nxt = next(n for n in padded.nodes if n.name == "next")
    assert padded.values[nxt.inputs[1]].shape == ((256, 256, 1, 1) if absorbed else (256, 252, 1, 1))
    assert (Op.SLICE in ops(padded)) is not absorbed
    same_results(graph, padded)


def _mbconv(c=24, hidden=120, out=60):
    """A MobileNetV3-style block: 1x1 expansion, ReLU6, 3x3 depthwise, hard swish, a squeeze and
    excitation (global mean, 1x1 to a quarter, ReLU, 1x1 back, sigmoid, scale), 1x1 projection."""
    b = GraphBuilder("mbconv")
    x = b.input("x", (1, c, 8, 8))
    y = b.node(Op.CLIP, [_conv(b, x, hidden, name="expand")], min=0.0, max=6.0)
    y = b.node(Op.HARD_SWISH, [_conv(b, y, hidden, k=3, group=hidden, name="depthwise")])
    s = b.node(Op.REDUCE_MEAN, [y], axes=(2, 3), keepdims=1)
    s = b.node(Op.SIGMOID, [_conv(b, b.node(Op.RELU, [_conv(b, s, hidden // 4, name="squeeze")]), hidden, name="excite")])
    b.output(_conv(b, b.node(Op.MUL, [y, s]), out, name="project"))
    return b.build()


def test_the_padding_rides_through_depthwise_convolutions_and_a_squeeze_excitation():
    """Every convolution of the block computes whole vectors of 16: the depthwise one with one
    group per padded channel, the scale of two padded values joined; one Slice, of the output."""
    graph = optimize(_mbconv())
    padded = pad_channels(graph, 16)
    assert _conv_channels(padded) == [128, 128, 32, 128, 64]
    depthwise = next(n for n in padded.nodes if n.name == "depthwise")
    assert depthwise.attrs["group"] == 128 and padded.values[depthwise.inputs[1]].shape == (128, 1, 3, 3)
    assert ops(padded).count(Op.SLICE) == 1 and ops(padded)[-1] is Op.SLICE
    same_results(graph, padded)


def _grouped(width):
    """A RegNet-style bottleneck: 1x1 to 60 channels, a 3x3 convolution in groups of `width`
    channels, 1x1 to 64."""
    b = GraphBuilder("grouped")
    y = b.node(Op.RELU, [_conv(b, b.input("x", (1, 32, 6, 6)), 60, name="reduce")])
    y = b.node(Op.RELU, [_conv(b, y, 60, k=3, group=60 // width, name="grouped")])
    b.output(_conv(b, y, 64, name="expand"))
    return b.build()


@pytest.mark.parametrize("width, carried", [(4, True), (3, False)])
def test_the_padding_rides_through_a_grouped_convolution_as_whole_groups(width, carried):
    """Padding 60 channels to 64 adds one group of 4 channels (zero filters), but no whole
    number of groups of 3: there the grouped convolution reads a Slice."""
    graph = optimize(_grouped(width))
    padded = pad_channels(graph, 16)
    grouped = next(n for n in padded.nodes if n.name == "grouped")
    assert grouped.attrs["group"] == (64 if carried else 60) // width
    assert _conv_channels(padded) == ([64, 64, 64] if carried else [64, 60, 64])
    assert (Op.SLICE in ops(padded)) is not carried
    same_results(graph, padded)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_padded_block_builds_and_matches_the_reference(target, tmp_path):
    built_matches_reference(_mbconv(), tmp_path / "mbconv.so", target, seed=2, atol=1e-5)
    built_matches_reference(_branches(), tmp_path / "branches.so", target, seed=2, atol=1e-5)
    built_matches_reference(_grouped(4), tmp_path / "grouped.so", target, seed=2, atol=1e-5)


def test_convolutions_that_fill_vectors_or_would_waste_too_much_are_left_alone():
    b = GraphBuilder("left")
    x = b.input("x", (1, 16, 4, 4))
    y = _conv(b, _conv(b, x, 256, name="whole"), 40, name="wasteful")  # 40 -> 48 on 16 lanes: 1/6 padding
    b.output(_conv(b, y, 40, k=3, group=40, name="depthwise"))
    graph = optimize(b.build())
    assert pad_channels(graph, 16) is graph


def _wasteful_chain():
    """40-channel projections (EfficientNet's) between convolutions of whole vectors."""
    b = GraphBuilder("projections")
    x = b.input("x", (1, 16, 4, 4))
    b.output(_conv(b, _conv(b, _conv(b, x, 256, name="expand"), 40, name="project"), 256, name="next"))
    return b.build()


def test_cores_that_run_full_vectors_at_full_width_pad_a_sixth():
    """On Zen 5 a block of 8 channels runs half a 512-bit FMA's work per instruction, and 40 -> 48
    pays; on Zen 4 (two halves per 512-bit op) and Intel's cores the limit stays `MAX_WASTE`."""
    graph = optimize(_wasteful_chain())
    assert _conv_channels(pad_channels(graph, 16, max_waste(ZEN5_CORES))) == [256, 48, 256]
    assert pad_channels(graph, 16, max_waste(ZEN4_CORES)) is graph
    zen5 = Target.parse("llvm", host=CpuInfo("AMD EPYC", frozenset({"avx2", "fma", "avx512f"}), vendor="amd", family=26))
    assert [n.attrs["out_block"] for n in optimize_for(_wasteful_chain(), zen5).nodes if n.op is Op.CONV_NCHWC] == [16] * 3
    same_results(graph, pad_channels(graph, 16, FULL_WIDTH_WASTE))


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


def test_a_narrow_convolution_read_by_another_is_no_head():
    """A squeeze to 8 channels read by a 3x3 convolution: padded to 16, the padding would
    double that convolution's work too, so neither is padded."""
    b = GraphBuilder("squeeze")
    y = b.node(Op.RELU, [_conv(b, b.input("x", (1, 32, 6, 6)), 8, name="squeeze")])
    b.output(_conv(b, y, 32, k=3, name="expand"))
    graph = optimize(b.build())
    assert pad_channels(graph, 16) is graph


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_padded_head_builds_and_matches_the_reference(target, tmp_path):
    built_matches_reference(_head(oc=3), tmp_path / "head.so", target, seed=2, atol=1e-5)


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_padded_build_matches_the_reference(target, tmp_path):
    manifest = built_matches_reference(classifier(), tmp_path / "head.so", target, seed=2, atol=1e-5)
    convs = [t["key"] for t in manifest["tasks"] if '"op":"ConvNCHWc"' in t["key"]]
    assert len(convs) == 1 and "[256,16,3,3]" in convs[0]
