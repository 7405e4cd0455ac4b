"""Build IR graphs directly in Python, with shapes inferred as nodes are added.

For tests and for code that synthesizes graphs (single-task benchmarks)
without going through ONNX.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.shapes import infer


class GraphBuilder:
    """Accumulates inputs, constants and nodes; `build()` returns the Graph."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.values: dict[str, Value] = {}
        self.inputs: list[Value] = []
        self.outputs: list[str] = []
        self.constants: dict[str, np.ndarray] = {}
        self.nodes: list[Node] = []

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> str:
        value = Value(name, tuple(shape), dtype)
        self.inputs.append(value)
        self.values[name] = value
        return name

    def constant(self, name: str, array: Any) -> str:
        array = np.asarray(array)
        self.constants[name] = array
        self.values[name] = Value(name, tuple(array.shape), array.dtype.name)
        return name

    def node(self, op: Op, inputs: Sequence[str], name: str | None = None, outputs: int = 1, **attrs: Any) -> str:
        """Add a node; returns its output, named after the node.

        A node with several outputs names them NAME:0, NAME:1, ... and
        returns the first.
        """
        name = name or f"{op.value.lower()}{len(self.nodes)}"
        names = (name,) if outputs == 1 else tuple(f"{name}:{i}" for i in range(outputs))
        node = Node(name, op, tuple(inputs), names, attrs)
        for value in infer(node, [self.values[i] for i in inputs]):
            self.values[value.name] = value
        self.nodes.append(node)
        return names[0]

    def output(self, *names: str) -> None:
        self.outputs.extend(names)

    def build(self) -> Graph:
        return Graph(
            inputs=tuple(self.inputs),
            outputs=tuple(self.values[name] for name in self.outputs),
            nodes=tuple(self.nodes),
            constants=dict(self.constants),
            values=dict(self.values),
            name=self.name,
        )
