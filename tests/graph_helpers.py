"""What the graph-pass tests share: the op sequence of a graph, and equality of two graphs' results."""
import numpy as np

from autosched.graph.reference import random_inputs, run_graph


def ops(graph):
    return [node.op for node in graph.nodes]


def transposes(graph):
    """The names of the nodes that transpose, on their own or composed into a CopyChain."""
    return [n.name for n in graph.nodes
            if n.op.value == "Transpose" or n.op.value == "CopyChain" and any(s[0] == "Transpose" for s in n.attrs["steps"])]


def same_results(before, after, seed=0):
    inputs = random_inputs(before.inputs, seed)
    want, got = run_graph(before, inputs), run_graph(after, inputs)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def built_matches_reference(graph, path, target, seed=1, rtol=1e-4, atol=1e-4) -> dict:
    """Build `graph` for `target` at `path`, check every output against the numpy reference on
    random inputs, and return the build's manifest (for what a test then asks of its kernels)."""
    from autosched.compile.model import build_model
    from autosched.runtime import load_model

    model = load_model(build_model(graph, path, target).library)
    try:
        feeds = random_inputs(graph.inputs, seed)
        got, want = model.run(feeds), run_graph(graph, feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=rtol, atol=atol)
        return model.manifest
    finally:
        model.close()
