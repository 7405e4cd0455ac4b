"""What the graph-pass tests share: the op sequence of a graph, and equality of two graphs' results."""
import numpy as np

from autosched.graph.reference import random_inputs, run_graph


def ops(graph):
    return [node.op for node in graph.nodes]


def same_results(before, after, seed=0):
    inputs = random_inputs(before.inputs, seed)
    want, got = run_graph(before, inputs), run_graph(after, inputs)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
