"""A tensor's maximum and minimum, both over every element, become one `ReduceRange`.

DynamicQuantizeLinear measures the range of a whole activation before quantizing it (ReduceMax
and ReduceMin over every axis, `opset/quantize.py`); as two kernels each reads the tensor, and
the second read of a dynamically quantized MobileNetV2's activations took 0.34 ms of its 3.5
(Xeon, 2 threads). One kernel reads each element once for both (`ops.reduce.reduce_range`).
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.ops.reduce import range_width


def _everything(graph: Graph, node: Node, lanes: int) -> bool:
    """Whether `node` reduces every axis of its input to one value, which `reduce_range` reads
    in vectors of `lanes` or fewer."""
    x = graph.values[node.inputs[0]]
    return (len(node.inputs) == 1 and not node.attrs.get("keepdims", 1) and x.dtype == "float32"
            and sorted(node.attrs["axes"]) == list(range(len(x.shape))) and bool(range_width(x.shape, lanes)))


def reduce_range(graph: Graph, lanes: int) -> Graph:
    """`graph` with each pair of a ReduceMax and a ReduceMin of every axis of one value one
    ReduceRange writing both results (at the place of the first of the two); `lanes`: the
    target's float32 vector."""
    pairs: dict[str, dict[Op, Node]] = {}
    for node in graph.nodes:
        if node.op in (Op.REDUCE_MAX, Op.REDUCE_MIN) and _everything(graph, node, lanes):
            pairs.setdefault(node.inputs[0], {}).setdefault(node.op, node)
    position = {node.name: k for k, node in enumerate(graph.nodes)}
    merged: dict[str, Node | None] = {}  # node name -> the range that replaces it, None after its first
    for found in pairs.values():
        if len(found) == 2:
            top, low = found[Op.REDUCE_MAX], found[Op.REDUCE_MIN]
            both = Node(f"{top.name}+range", Op.REDUCE_RANGE, top.inputs, (top.outputs[0], low.outputs[0]))
            first, second = sorted((top, low), key=lambda n: position[n.name])
            merged[first.name], merged[second.name] = both, None
    if not merged:
        return graph
    nodes = [merged.get(n.name, n) for n in graph.nodes if merged.get(n.name, n) is not None]
    return graph.replace(nodes=tuple(nodes))
