"""Pow by a constant 2, 3 or ½ as multiplications or a square root.

Exporters write x² as Pow(x, 2) (the variance of a LayerNorm decomposed below
opset 17, RMSNorm) and x³ as Pow(x, 3) (the tanh GELU). A generic powf costs
tens of cycles per element where a multiply costs one, and leaves the chain
opaque to the patterns (`fold_layer_norm`) that look for x·x.
"""

from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.rewrite import fresh_name, rebuild


def reduce_pow(graph: Graph) -> Graph:
    """`graph` with every Pow by a scalar constant 2, 3 or 0.5 on floats rewritten."""
    taken = set(graph.values)
    nodes: list[Node] = []
    new_values: list[Value] = []
    changed = False
    for node in graph.nodes:
        exponent = _scalar_exponent(graph, node)
        if exponent is None:
            nodes.append(node)
            continue
        x, out = node.inputs[0], node.outputs[0]
        if exponent == 2.0:
            nodes.append(Node(node.name, Op.MUL, (x, x), (out,)))
        elif exponent == 3.0:
            square = fresh_name(f"{out}_square", taken)
            taken.add(square)
            nodes.append(Node(f"{node.name}_square", Op.MUL, (x, x), (square,)))
            nodes.append(Node(node.name, Op.MUL, (square, x), (out,)))
            new_values.append(Value(square, graph.values[out].shape, graph.values[out].dtype))
        else:
            nodes.append(Node(node.name, Op.SQRT, (x,), (out,)))
        changed = True
    return rebuild(graph, nodes, new_values=new_values) if changed else graph


def _scalar_exponent(graph: Graph, node: Node) -> float | None:
    """The exponent of a float Pow whose exponent is a one-element constant in {2, 3, 0.5}
    and whose result has the base's shape (a broadcasting exponent changes the shape)."""
    if node.op is not Op.POW or node.inputs[1] not in graph.constants:
        return None
    base, out = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    exponent = graph.constants[node.inputs[1]]
    if exponent.size != 1 or not base.dtype.startswith("float") or base.shape != out.shape:
        return None
    value = float(np.asarray(exponent).reshape(()))
    return value if value in (2.0, 3.0, 0.5) else None
