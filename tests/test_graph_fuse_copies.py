"""Chains of copies composed into one CopyChain (`graph/passes/fuse_copies.py`): which chains,
that the composed graph computes what the chain did (numpy reference), that its task survives
its key, and that builds match the reference with one kernel where the chain ran several."""
import re
from dataclasses import replace

import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results
from isa import RUN_TARGETS

from autosched.compile.kernel import source
from autosched.compile.model import default_kernel
from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize, optimize_for
from autosched.task import extract_tasks, task_from_key

RNG = np.random.default_rng(11)


def _conv_then(perm, *, second_reader=False):
    """A 3x3 convolution (blocked by layout planning) whose output is transposed by `perm` (back
    to plain channels first: two copies in a row), then a ReLU; with `second_reader`, the
    convolution's output is also a graph output, so the first copy's value is read twice."""
    b = GraphBuilder("chain")
    x = b.input("x", (1, 16, 8, 8))
    w = b.constant("w", (0.1 * RNG.standard_normal((16, 16, 3, 3))).astype(np.float32))
    y = b.node(Op.CONV, [x, w], name="conv", strides=(1, 1), pads=(1,) * 4, dilations=(1, 1), group=1)
    t = b.node(Op.TRANSPOSE, [y], name="perm", perm=perm)
    b.output(b.node(Op.RELU, [t], name="act"), *([y] if second_reader else []))
    return b.build()


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_layout_conversion_and_a_transpose_become_one_copy(lanes):
    graph = _conv_then((0, 2, 3, 1))
    planned = optimize(graph, lanes)
    (chain,) = [n for n in planned.nodes if n.op is Op.COPY_CHAIN]
    assert [step[0] for step in chain.attrs["steps"]] == ["LayoutTransform", "Transpose"]
    left = [n for n in planned.nodes if n.op in (Op.TRANSPOSE, Op.LAYOUT_TRANSFORM)]
    assert [n.inputs for n in left] == [("x",)]  # only the input's conversion into blocks
    assert planned.values[chain.outputs[0]].shape == (1, 8, 8, 16)
    same_results(graph, planned)


def test_a_copy_whose_input_is_read_elsewhere_stays_a_copy():
    """The blocked convolution's plain output is a graph output too: the conversion is written
    anyway, and the Transpose reads it."""
    planned = optimize(_conv_then((0, 2, 3, 1), second_reader=True), 8)
    assert Op.COPY_CHAIN not in [n.op for n in planned.nodes]


def test_a_reshape_of_a_graph_input_at_the_head_stays_its_own_kernel():
    """A patch embedding's Reshape of the model's input streams it once; the Transpose after it
    gathers from cache (composed, the gather read the cold input patch by patch)."""
    b = GraphBuilder("patches")
    x = b.input("x", (1, 3, 32, 32))
    rows = b.node(Op.RESHAPE, [x], name="rows", shape=(1, 3, 2, 16, 2, 16))
    order = b.node(Op.TRANSPOSE, [rows], name="order", perm=(0, 2, 4, 1, 3, 5))
    b.output(b.node(Op.RELU, [order], name="act"))
    planned = optimize(b.build(), 8)
    assert Op.COPY_CHAIN not in [n.op for n in planned.nodes]


def test_a_chains_task_is_rebuilt_from_its_key():
    tasks = extract_tasks(optimize(_conv_then((0, 3, 1, 2)), 8)).tasks
    (task,) = [t for t in tasks if t.op == "CopyChain"]
    assert task_from_key(task.key) == task
    (got,) = task.reference(inputs := task.random_inputs(0))
    blocked = inputs[0]  # 1x2x8x8x8: channel c = 8 * block + lane
    plain = blocked.transpose(0, 1, 4, 2, 3).reshape(1, 16, 8, 8)
    np.testing.assert_array_equal(got, plain.transpose(0, 3, 1, 2))


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_the_build_runs_one_copy_kernel_and_matches_the_reference(target, tmp_path):
    graph = _conv_then((0, 2, 3, 1))
    manifest = built_matches_reference(graph, tmp_path / "chain.so", target)
    copies = [c["op"] for c in manifest["calls"] if c["op"] in ("CopyChain", "Transpose", "LayoutTransform")]
    assert copies.count("CopyChain") == 1 and "Transpose" not in copies


def _shuffle_units(c=58, side=8, units=3):
    """ShuffleNetV2 units: split the channels in two, a 1x1 convolution and ReLU on one half,
    concatenate, shuffle (reshape, transpose, reshape). From the second unit on, the passed-on
    half is a view of the previous shuffle, so the Concat is a kernel; 58 channels are padded
    to whole vectors and sliced before it (a view: then the first unit's Concat is a kernel too)."""
    b = GraphBuilder("shuffle")
    x = b.input("x", (1, 2 * c, side, side))
    for u in range(units):
        left = b.node(Op.SPLIT, [x], name=f"u{u}/split", outputs=2, axis=1, split=(c, c))
        right = f"u{u}/split:1"
        w = b.constant(f"u{u}/w", (0.2 * RNG.standard_normal((c, c, 1, 1))).astype(np.float32))
        y = b.node(Op.RELU, [b.node(Op.CONV, [right, w], name=f"u{u}/conv", strides=(1, 1), pads=(0,) * 4,
                                    dilations=(1, 1), group=1)], name=f"u{u}/relu")
        cat = b.node(Op.CONCAT, [left, y], name=f"u{u}/cat", axis=1)
        pairs = b.node(Op.RESHAPE, [cat], name=f"u{u}/rs1", shape=(1, 2, c, side, side))
        x = b.node(Op.RESHAPE, [b.node(Op.TRANSPOSE, [pairs], name=f"u{u}/shuffle", perm=(0, 2, 1, 3, 4))],
                   name=f"u{u}/rs2", shape=(1, 2 * c, side, side))
    b.output(x)
    return b.build()


@pytest.mark.parametrize("lanes", [8, 16])
def test_a_concat_that_copies_takes_its_inputs_copies_and_the_shuffle_after_it(lanes):
    """Each unit's Concat, its convolution's conversion back to plain (and slice), the shuffle's
    Transpose: one kernel, which reads the passed-on half and the blocked result where they are
    (a ShuffleNetV2 block 1.10x faster, EPYC Zen 5). The first unit's too: its slice of the
    conversion is a view (`aliases`), so its Concat cannot take it in place either (it took the
    copies of the slice, and the Transpose was a kernel of its own: 8 kernels for 3 units, now
    7; ShuffleNetV2 1.08x faster, EPYC Zen 4)."""
    graph = _shuffle_units()
    planned = optimize(graph, lanes)
    chains = {n.name: n for n in planned.nodes if n.op is Op.COPY_CHAIN and "branches" in n.attrs}
    assert sorted(chains) == ["u0/shuffle", "u1/shuffle", "u2/rs2"]  # the last unit's ends in the graph's output
    chain = chains["u1/shuffle"]
    assert [s[0] for s in chain.attrs["steps"]] == ["Concat", "Reshape", "Transpose"]
    assert [[s[0] for s in b] for b in chain.attrs["branches"]] == [[], ["LayoutTransform", "Slice"]]
    assert chain.inputs == ("u1/split:0", f"u1/relu_pad64@nchw{lanes}c")  # a view, the blocked result
    assert not [n for n in planned.nodes if n.op in (Op.CONCAT, Op.TRANSPOSE, Op.LAYOUT_TRANSFORM, Op.SLICE)
                and n.name.startswith(("u1/", "u2/"))]
    same_results(graph, planned)
    for task in [t for t in extract_tasks(planned).tasks if t.op == "CopyChain" and len(t.shapes) == 2]:
        assert replace(task_from_key(task.key), weight=task.weight) == task  # u0's and u1's are one task


def test_the_shuffles_chain_copies_whole_planes_in_vectors():
    """The Concat's choice of input depends on the channel only, though the Reshape's flat
    index carries the row and column into its condition: the run along rows and columns is
    one vector loop, not rows of 8 in vectors of 8."""
    from autosched import te
    from autosched.ops.transform import copy_suffix
    from autosched.opset.record import ComputeArgs
    from autosched.opset.registry import lookup

    planned = optimize(_shuffle_units(), 16)
    (chain,) = [n for n in planned.nodes if n.name == "u1/shuffle"]
    xs = tuple(te.placeholder(planned.values[i].shape, name=f"in{k}") for k, i in enumerate(chain.inputs))
    (out,) = lookup(chain.op).compute(ComputeArgs(dict(chain.attrs), xs, (planned.values[chain.outputs[0]].shape,),
                                                  None, None))
    assert out.shape == (1, 58, 2, 8, 8) and copy_suffix(out) == 3


def test_a_concat_converted_to_plain_keeps_the_conversion_apart():
    """A layout conversion after a Concat keeps its own schedule (an Inception block's concat
    converted back to plain ran 0.049 ms as one chain against 0.015 as a conversion)."""
    b = GraphBuilder("cat_out")
    x = b.input("x", (1, 32, 6, 6))
    left, right = b.node(Op.SPLIT, [x], name="split", outputs=2, axis=1, split=(16, 16)), "split:1"
    w = b.constant("w", (0.2 * RNG.standard_normal((16, 16, 1, 1))).astype(np.float32))
    y = b.node(Op.CONV, [right, w], name="conv", strides=(1, 1), pads=(0,) * 4, dilations=(1, 1), group=1)
    cat = b.node(Op.CONCAT, [y, b.node(Op.RELU, [left], name="relu")], name="cat", axis=1)
    b.output(b.node(Op.RELU, [b.node(Op.TRANSPOSE, [cat], name="t", perm=(0, 1, 3, 2))], name="out"))
    planned = optimize(b.build(), 16)
    assert not [n for n in planned.nodes if n.op is Op.COPY_CHAIN and "branches" in n.attrs
                and any(s[0] == "LayoutTransform" for s in n.attrs["steps"])]


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_shuffle_units_build_and_match_the_reference(target, tmp_path):
    manifest = built_matches_reference(_shuffle_units(units=3), tmp_path / "shuffle.so", target)
    ops = [c["op"] for c in manifest["calls"]]
    assert "Concat" not in ops and "Transpose" not in ops and ops.count("CopyChain") == 3


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_chain_out_of_channel_blocks_walks_the_blocks_channels_inside_the_columns(target, tmp_path):
    """A 1-D convolution's output as the graph's: its conversion to the plain layout and the
    Reshape back to 1-D are one copy, whose vectors gather one channel each from pixels of a
    block's channels; those channels run inside the loop over columns, with no division in
    their indices (WaveNet's 4 MB output: 0.375 -> 0.106 ms, channel by channel over whole rows
    before)."""
    b = GraphBuilder("out1d")
    w = b.constant("w", (0.2 * RNG.standard_normal((64, 16, 1))).astype(np.float32))
    b.output(b.node(Op.CONV, [b.input("x", (1, 16, 300)), w], strides=(1,), pads=(0, 0), dilations=(1,), group=1))
    graph = b.build()
    manifest = built_matches_reference(graph, tmp_path / "out1d.so", target)
    (chain,) = [t for t in extract_tasks(optimize_for(graph, target)).tasks if t.op == "CopyChain"]
    block = chain.shapes[0][-1]
    code = source(*default_kernel(chain, target), "chain")
    loops = re.findall(r"for \(int32_t (\w+) = 0; \1 < (\d+);", code)
    assert loops[-1][1] == str(block), loops
    inner = re.sub(r"/\*.*?\*/", "", code[code.index(f"{loops[-1][0]} < {block}"):].split("}")[0])
    assert not re.search(r"[/%]", inner), inner
    assert [c["op"] for c in manifest["calls"]].count("CopyChain") == 1
