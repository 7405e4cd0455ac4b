"""Remove Identity, inference-mode Dropout and a Cast to the type its input already has: all
pass their input through. (DINOv2's export casts its float32 image to float32: a copy of the
whole input, 0.076 ms of the model's 11.3, EPYC Zen 4, 2 threads.)

So does a Cast back to float of a Cast to an integer type whose float operand already holds
integers within that type's range: what a quantized model's QuantizeLinear (rounded, plus the
zero point, clipped to the type) hands the next DequantizeLinear, and the QOperator ops their
successors. gcc compiles a vector conversion to int8 and back lane by lane, 48 scalar
instructions per 16 values: a QDQ ResNet-18's 56x56 convolutions ran 0.66 ms alone against the
float model's 0.44 (Xeon, 2 threads)."""

from __future__ import annotations

import numpy as np

from autosched.graph.integers import integral
from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import rebuild, rename_inputs

_PASS_THROUGH = (Op.IDENTITY, Op.DROPOUT)


def remove_identity(graph: Graph) -> Graph:
    """`graph` with pass-through nodes bypassed.

    An Identity whose output is a graph output stays only where its input is
    a graph input, a constant or another graph output: there the copy is the
    only thing that produces the output under its own name.
    """
    outputs = {value.name for value in graph.outputs}
    producers = graph.producers()
    readers_of: dict[str, str] = {}  # consumers of key read value instead
    writers_of: dict[str, str] = {}  # producer of key writes value instead
    kept: list[Node] = []
    for node in graph.nodes:
        round_trip = _round_trip_source(graph, producers, node)
        if node.op not in _PASS_THROUGH and not _same_type_cast(graph, node) and round_trip is None:
            kept.append(node)
            continue
        passed = round_trip or node.inputs[0]
        source, target = readers_of.get(passed, passed), node.outputs[0]
        if target not in outputs:
            readers_of[target] = source
        elif source in producers and source not in outputs and source not in writers_of:
            writers_of[source] = target
            readers_of[source] = target
        else:
            kept.append(rename_inputs(node, readers_of))
    resolved = {name: _last(readers_of, name) for name in readers_of}
    rewritten = []
    for node in kept:
        node = rename_inputs(node, resolved)
        if any(out in writers_of for out in node.outputs):
            node = Node(node.name, node.op, node.inputs, tuple(writers_of.get(o, o) for o in node.outputs), node.attrs)
        rewritten.append(node)
    return rebuild(graph, rewritten)


def _same_type_cast(graph: Graph, node: Node) -> bool:
    return node.op is Op.CAST and node.attrs.get("to") == graph.values[node.inputs[0]].dtype


def _round_trip_source(graph: Graph, producers: dict[str, Node], node: Node) -> str | None:
    """The float value a Cast of a Cast gives back unchanged, if `node` is one: the inner Cast
    takes a float of that type to an integer type, and a Clip within that type's range of
    integer values produced it."""
    if node.op is not Op.CAST or node.inputs[0] not in producers:
        return None
    inner = producers[node.inputs[0]]
    if inner.op is not Op.CAST or inner.inputs[0] not in producers:
        return None
    source = graph.values[inner.inputs[0]]
    kind = np.dtype(graph.values[inner.outputs[0]].dtype)
    if source.dtype != node.attrs.get("to") or kind.kind not in "iu" or np.dtype(source.dtype).kind != "f":
        return None
    clip = producers[source.name]
    info = np.iinfo(kind)
    if clip.op is not Op.CLIP or not info.min <= clip.attrs.get("min", -np.inf) <= clip.attrs.get("max", np.inf) <= info.max:
        return None
    return source.name if integral(graph, producers, source.name) else None


def _last(readers_of: dict[str, str], name: str) -> str:
    """Where a reader of `name` reads in the end: a pass-through's input may itself be renamed
    later (ONNX's expanded Attention casts its scores to their own type for the softmax and
    passes them to a graph output through an Identity, which then writes them)."""
    seen = set()
    while name in readers_of and name not in seen:
        seen.add(name)
        name = readers_of[name]
    return name
