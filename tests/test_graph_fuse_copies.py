"""Chains of copies composed into one CopyChain (`graph/passes/fuse_copies.py`): which chains,
that the composed graph computes what the chain did (numpy reference), that its task survives
its key, and that builds match the reference with one kernel where the chain ran several."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference, same_results
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import optimize
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
