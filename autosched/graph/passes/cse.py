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
    # constants are first told apart by dtype, shape and their first and last elements' bytes,
    # and compared whole only where those agree: every weight's bytes copied out at each pass
    # took 15 ms of each optimize of MaxViT, which the substitution search runs a hundred times
    kept_constants: dict[Hashable, list[str]] = {}
    for name, array in graph.constants.items():
        flat = array.reshape(-1)
        alike = kept_constants.setdefault((array.dtype.name, array.shape, flat[:4].tobytes(), flat[-4:].tobytes()), [])
        equal = next((k for k in alike if graph.constants[k].tobytes() == array.tobytes()), None)
        if equal is not None and name not in outputs:
            mapping[name] = equal
        elif equal is None:
            alike.append(name)
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
