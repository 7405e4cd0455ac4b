"""Common-subexpression elimination.

Exporters duplicate work (the same Shape→Gather chain, the same constant
written twice, one activation computed for each reader); merging identical
constants and identical nodes lets the duplicates share one kernel and one
buffer.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from autosched.graph.ir import Graph, Node
from autosched.graph.passes.rewrite import rebuild, rename_inputs


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """`graph` with equal constants merged and repeated nodes computed once."""
    outputs = {value.name for value in graph.outputs}
    mapping: dict[str, str] = {}
    first_constant: dict[Hashable, str] = {}
    for name, array in graph.constants.items():
        signature = (array.dtype.name, array.shape, array.tobytes())
        if signature in first_constant and name not in outputs:
            mapping[name] = first_constant[signature]
        else:
            first_constant.setdefault(signature, name)
    first_node: dict[Hashable, Node] = {}
    kept: list[Node] = []
    for node in graph.nodes:
        node = rename_inputs(node, mapping)
        node_signature = (node.op, node.inputs, _freeze(node.attrs))
        earlier = first_node.get(node_signature)
        if earlier is not None and not outputs.intersection(node.outputs):
            mapping.update(zip(node.outputs, earlier.outputs))
            continue
        first_node.setdefault(node_signature, node)
        kept.append(node)
    constants = {name: array for name, array in graph.constants.items() if name not in mapping}
    return rebuild(graph, kept, constants)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted((key, _freeze(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    return value
