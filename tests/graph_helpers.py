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


def built_matches_onnxruntime(path, so_path, rtol=1e-3, atol=1e-4, target="llvm"):
    """Import the ONNX model at `path`, build it for `target` at `so_path` and check it against
    onnxruntime on random inputs; returns the imported graph."""
    from autosched.compile.evaluate import compare, onnxruntime_session, sample_inputs
    from autosched.compile.model import build_model
    from autosched.frontend.onnx import load_onnx
    from autosched.runtime import load_model

    graph = load_onnx(path)
    model = load_model(build_model(graph, so_path, target).library)
    try:
        diffs = compare(model, onnxruntime_session(path, 2), sample_inputs(graph, 1), rtol=rtol, atol=atol)
    finally:
        model.close()
    assert diffs and all(d.ok for d in diffs), diffs
    return graph


def aspp_graph(c=32, hw=33, seed=7):
    """DeepLab-v3's ASPP at output stride 16 of a 513x513 image (33x33): a 3x3 stem, a 1x1 branch
    and 3x3 branches of dilation 12 and 24 (cut into regions by `crop_taps`) and 36, with their
    Relus, concatenated and projected."""
    from autosched.graph.builder import GraphBuilder
    from autosched.graph.ir import Op

    rng = np.random.default_rng(seed)
    b = GraphBuilder("aspp")

    def conv(x, k, d, name):
        w = b.constant(f"{name}_w", (0.1 * rng.standard_normal((c, b.values[x].shape[1], k, k))).astype(np.float32))
        return b.node(Op.CONV, [x, w], name=name, strides=(1, 1), pads=(d * (k // 2),) * 4, dilations=(d, d), group=1)

    x = conv(b.input("x", (1, c, hw, hw)), 3, 1, "stem")
    branches = [b.node(Op.RELU, [conv(x, 1 if d == 1 else 3, d, f"aspp{d}")], name=f"relu{d}") for d in (1, 12, 24, 36)]
    b.output(conv(b.node(Op.CONCAT, branches, name="cat", axis=1), 1, 1, "project"))
    return b.build()
