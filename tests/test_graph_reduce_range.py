"""The pass that makes a tensor's maximum and minimum over every element one ReduceRange: which
pairs it merges, that the graph computes the same, and a dynamically quantized model built so."""
import numpy as np
import pytest
from graph_helpers import built_matches_reference
from isa import RUN_TARGETS

from autosched.graph.builder import GraphBuilder
from autosched.graph.ir import Op
from autosched.graph.passes import reduce_range
from autosched.graph.reference import random_inputs, run_graph


def _ranges(shape=(1, 16, 6, 6), keepdims=0, other_axes=None):
    """x's maximum and minimum, of every axis unless `other_axes`, and y's maximum alone."""
    b = GraphBuilder("ranges")
    x, y = b.input("x", shape), b.input("y", shape)
    every = tuple(range(len(shape)))
    top = b.node(Op.REDUCE_MAX, [x], axes=every, keepdims=keepdims)
    low = b.node(Op.REDUCE_MIN, [x], axes=other_axes or every, keepdims=keepdims)
    b.output(b.node(Op.SUB, [top, low]), b.node(Op.REDUCE_MAX, [y], axes=every, keepdims=0))
    return b.build()


def test_the_maximum_and_the_minimum_of_one_tensor_are_one_node():
    graph = _ranges()
    merged = reduce_range(graph, 16)
    ops = [n.op for n in merged.nodes]
    assert ops.count(Op.REDUCE_RANGE) == 1 and Op.REDUCE_MIN not in ops and ops.count(Op.REDUCE_MAX) == 1
    feeds = random_inputs(graph.inputs, 0)
    want, got = run_graph(graph, feeds), run_graph(merged, feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("graph", [_ranges(keepdims=1), _ranges(other_axes=(1, 2, 3)), _ranges(shape=(3, 25))],
                         ids=["keepdims", "other_axes", "no_whole_vectors"])
def test_other_reductions_stay_apart(graph):
    assert reduce_range(graph, 16) is graph


@pytest.mark.parametrize("target", RUN_TARGETS, ids=lambda t: t.isa)
def test_a_built_range_matches_the_reference(target, tmp_path):
    manifest = built_matches_reference(_ranges(), tmp_path / "ranges.so", target, atol=0, rtol=0)
    assert [c["op"] for c in manifest["calls"]].count("ReduceRange") == 1
