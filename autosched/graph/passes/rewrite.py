"""Small helpers the passes share for building a rewritten graph."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value


def rebuild(
    graph: Graph,
    nodes: Iterable[Node],
    constants: Mapping[str, np.ndarray] | None = None,
    new_values: Iterable[Value] = (),
) -> Graph:
    """`graph` with new nodes/constants; value records of vanished values dropped."""
    nodes = tuple(nodes)
    constants = dict(graph.constants if constants is None else constants)
    values = {**graph.values, **{v.name: v for v in new_values}}
    used = {v.name for v in (*graph.inputs, *graph.outputs)}
    used.update(name for node in nodes for name in (*node.inputs, *node.outputs))
    return graph.replace(
        nodes=nodes,
        constants={name: array for name, array in constants.items() if name in used},
        values={name: value for name, value in values.items() if name in used},
    )


def fold_into_readers(graph: Graph, folded: Mapping[str, tuple[str, Any]], producer: Op, reader: Op,
                      attrs: Callable[[Node, Any], dict[str, Any]]) -> Graph:
    """`graph` without the `producer` nodes whose outputs `folded` maps to (their input, what
    they did), each of its `reader` nodes reading that input with `attrs(reader, what)`: a Pad
    or a Slice taken into the convolutions that read it (`fold_pad`, `conv_windows`)."""
    nodes = []
    for node in graph.nodes:
        if node.op is producer and node.outputs[0] in folded:
            continue
        if node.op is reader and node.inputs[0] in folded:
            source, what = folded[node.inputs[0]]
            node = Node(node.name, node.op, (source, *node.inputs[1:]), node.outputs, attrs(node, what))
        nodes.append(node)
    return rebuild(graph, nodes)


def rename_inputs(node: Node, mapping: Mapping[str, str]) -> Node:
    """`node` reading `mapping[name]` wherever it read `name`."""
    if not any(name in mapping for name in node.inputs):
        return node
    return Node(node.name, node.op, tuple(mapping.get(n, n) for n in node.inputs), node.outputs, node.attrs)


def fresh_name(base: str, taken: Mapping[str, object] | set[str]) -> str:
    """`base`, or `base` with the smallest numeric suffix not in `taken`."""
    if base not in taken:
        return base
    i = 1
    while f"{base}_{i}" in taken:
        i += 1
    return f"{base}_{i}"


class NewValues:
    """The values a rewrite adds to `graph`, each under a fresh name."""

    def __init__(self, graph: Graph) -> None:
        self.taken = set(graph.values)
        self.values: list[Value] = []

    def __call__(self, base: str, shape: tuple[int, ...], dtype: str) -> str:
        """A new value named after `base`; returns its name."""
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        self.values.append(Value(name, shape, dtype))
        return name


class Emitter:
    """The nodes that replace one node, each named after it, the values they add named after its
    output, which the last one writes (`last=True`)."""

    def __init__(self, node: Node, out: Value, constants: dict[str, np.ndarray], value: NewValues) -> None:
        self.node, self.out, self.constants, self.value = node, out, constants, value
        self.nodes: list[Node] = []

    def step(self, label: str, op: Op, inputs: tuple[str, ...], attrs: dict | None = None, last: bool = False,
             dtype: str = "float32", shape: tuple[int, ...] | None = None) -> str:
        name = self.out.name if last else self.value(f"{self.out.name}:{label}", self.out.shape if shape is None else shape, dtype)
        self.nodes.append(Node(f"{self.node.name}/{label}", op, inputs, (name,), attrs or {}))
        return name

    def constant(self, label: str, array: np.ndarray) -> str:
        name = self.value(f"{self.out.name}:{label}", array.shape, array.dtype.name)
        self.constants[name] = array
        return name
