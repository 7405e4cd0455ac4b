"""A numpy evaluator with ONNX semantics for every IR operator.

It is the ground truth inside autosched: constant folding runs nodes through
it, the frontend's conformance tests hold it against ONNX's own expected
outputs, and compiled kernels are checked against it.  Each op's evaluator is
its record's `reference` (autosched.opset); they favour exactness over speed,
except for Conv and pooling, which run as strided windows plus one matmul or
reduction so whole models evaluate in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from autosched.errors import GraphError
from autosched.graph.ir import Graph, Node, Value
from autosched.opset.registry import lookup


def run_graph(graph: Graph, inputs: Mapping[str, np.ndarray], *, all_values: bool = False) -> dict[str, np.ndarray]:
    """Evaluate `graph`; returns its outputs, or every value with `all_values`."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for value in graph.inputs:
        if value.name not in inputs:
            raise GraphError(f"no data for graph input '{value.name}'")
        array = np.asarray(inputs[value.name])
        if tuple(array.shape) != value.shape or array.dtype.name != value.dtype:
            raise GraphError(
                f"graph input '{value.name}' expects {value.dtype}{list(value.shape)}, "
                f"got {array.dtype.name}{list(array.shape)}"
            )
        env[value.name] = array
    for node in graph.nodes:
        results = eval_node(node, [env[name] for name in node.inputs])
        for name, result in zip(node.outputs, results):
            expected = graph.values[name]
            if tuple(result.shape) != expected.shape or result.dtype.name != expected.dtype:
                raise GraphError(
                    f"node '{node.name}' ({node.op}) computed {result.dtype.name}{list(result.shape)} "
                    f"for '{name}', declared {expected.dtype}{list(expected.shape)}"
                )
            env[name] = result
    if all_values:
        return env
    return {value.name: env[value.name] for value in graph.outputs}


def eval_node(node: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Outputs of one node applied to concrete arrays."""
    with np.errstate(all="ignore"):
        return lookup(node.op).reference(node.attrs, list(args))[: len(node.outputs)]


def random_inputs(values: Sequence[Value], seed: int) -> dict[str, np.ndarray]:
    """Seeded test data: standard normal floats, small non-negative integers."""
    rng = np.random.default_rng(seed)
    data: dict[str, np.ndarray] = {}
    for value in values:
        dtype = np.dtype(value.dtype)
        if dtype.kind == "f":
            data[value.name] = rng.standard_normal(value.shape).astype(dtype)
        elif dtype.kind == "b":
            data[value.name] = rng.integers(0, 2, value.shape).astype(dtype)
        else:
            data[value.name] = rng.integers(0, 10, value.shape).astype(dtype)
    return data
