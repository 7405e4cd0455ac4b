"""Dead-code elimination: drop nodes and constants no graph output needs."""

from __future__ import annotations

from autosched.graph.ir import Graph
from autosched.graph.passes.rewrite import rebuild


def eliminate_dead_code(graph: Graph) -> Graph:
    """`graph` without the nodes whose results never reach an output."""
    needed = {value.name for value in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(out in needed for out in node.outputs):
            kept.append(node)
            needed.update(node.inputs)
    return rebuild(graph, reversed(kept))
