"""Static shape and dtype inference for every IR operator.

The frontend needs a shape for every value it creates, and so do passes that
build new nodes; both call `infer`, which applies the op record's shape
function.  Inputs that disagree with an operator (a Conv whose channels do
not match its weights, operands that do not broadcast) raise GraphError
naming the node.
"""

from __future__ import annotations

from collections.abc import Sequence

from autosched.errors import GraphError
from autosched.graph.ir import Node, Value
from autosched.opset.registry import lookup


def infer(node: Node, inputs: Sequence[Value]) -> list[Value]:
    """Output values of `node` given its input values."""
    try:
        results = lookup(node.op).shape(node, inputs)
    except (ValueError, IndexError, KeyError) as exc:
        raise GraphError(f"node '{node.name}' ({node.op}): {exc}") from exc
    if len(results) != len(node.outputs):
        raise GraphError(f"node '{node.name}' ({node.op}) has {len(node.outputs)} outputs, expected {len(results)}")
    return [Value(name, tuple(int(d) for d in shape), dtype) for name, (shape, dtype) in zip(node.outputs, results)]
