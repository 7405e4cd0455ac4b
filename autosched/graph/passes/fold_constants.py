"""Constant folding: evaluate every node whose inputs are all constants.

Such nodes would otherwise become kernels that recompute the same numbers
on every inference (weight transposes, scale products, shape arithmetic).
"""

from __future__ import annotations

from autosched.graph.ir import Graph, Node
from autosched.graph.passes.rewrite import rebuild
from autosched.graph.reference import eval_node


def fold_constants(graph: Graph) -> Graph:
    """`graph` with all-constant nodes replaced by their results."""
    constants = dict(graph.constants)
    kept: list[Node] = []
    for node in graph.nodes:
        if node.inputs and all(name in constants for name in node.inputs):
            for name, result in zip(node.outputs, eval_node(node, [constants[n] for n in node.inputs])):
                constants[name] = result
        else:
            kept.append(node)
    return rebuild(graph, kept, constants)
