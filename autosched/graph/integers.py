"""Which float values of a graph hold integers, and within what bounds.

A quantized model computes on integers written as floats: QuantizeLinear rounds, adds its zero
point and clips to the integer type, and its successors subtract the zero point again. Passes
that give such values their integer form back (`remove_identity`'s round trips,
`integer_matmul`'s int8 products) ask here what a value provably holds, looking a few
producers up.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op

#: producers looked through before giving up
DEPTH = 5


def integral(graph: Graph, producers: dict[str, Node], name: str, depth: int = DEPTH) -> bool:
    """Whether value `name` holds integers only: a constant of integers, a rounding, an integer
    value cast, or sums, differences and clips (to integer bounds) of such, `depth` levels down."""
    if name in graph.constants:
        array = graph.constants[name]
        return bool(np.all(np.isfinite(array)) and np.all(array == np.round(array)))
    node = producers.get(name)
    if node is None or depth == 0:
        return False
    if node.op in (Op.ROUND, Op.FLOOR, Op.CEIL):
        return True
    if node.op is Op.CAST:
        return np.dtype(graph.values[node.inputs[0]].dtype).kind in "iub"
    if node.op in (Op.ADD, Op.SUB):
        return all(integral(graph, producers, i, depth - 1) for i in node.inputs)
    if node.op is Op.CLIP:
        bounds = [node.attrs.get("min", 0.0), node.attrs.get("max", 0.0)]
        return all(float(b).is_integer() for b in bounds) and integral(graph, producers, node.inputs[0], depth - 1)
    return False


def integer_range(graph: Graph, producers: dict[str, Node], name: str, depth: int = DEPTH) -> tuple[int, int] | None:
    """(least, greatest) integer value `name` can hold, where it holds integers only and both
    bounds are known: a constant's, an integer type's, a clip's, or those of sums and
    differences of such; else None."""
    if not integral(graph, producers, name, depth):
        return None
    if name in graph.constants:
        array = graph.constants[name]
        return (int(array.min()), int(array.max())) if array.size else None
    node = producers[name]
    if node.op is Op.CAST:
        kind = np.dtype(graph.values[node.inputs[0]].dtype)
        return (0, 1) if kind.kind == "b" else (int(np.iinfo(kind).min), int(np.iinfo(kind).max))
    if node.op is Op.CLIP:
        if "min" not in node.attrs or "max" not in node.attrs:
            return None
        return int(node.attrs["min"]), int(node.attrs["max"])
    if node.op in (Op.ADD, Op.SUB) and len(node.inputs) == 2:
        a, b = (integer_range(graph, producers, i, depth - 1) for i in node.inputs)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if node.op is Op.ADD else (a[0] - b[1], a[1] - b[0])
    return None
