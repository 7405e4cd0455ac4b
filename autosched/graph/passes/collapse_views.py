"""Collapse a chain of Reshapes and Transposes that leaves every element where it was.

Rewrites and exporters leave chains such as NHWC → NCHW → [N, C, H·W] → [N, H·W, C] (a patch
embedding turned MatMul, read back as tokens): each Transpose is a copy, and together they
move nothing. A chain whose composition keeps the flat order of the elements is a Reshape,
and one that also ends in its input's shape is nothing: its readers read the input (two 1-D
convolutions in a row, each lifted to 2-D between Reshapes, meet in such a pair).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.rewrite import rebuild, rename_inputs

_VIEWS = (Op.RESHAPE, Op.TRANSPOSE)
#: chains over more elements than this are left alone (the check builds an index array)
MAX_ELEMENTS = 1 << 24


def collapse_views(graph: Graph) -> Graph:
    """`graph` with each Reshape/Transpose chain that preserves element order replaced by one Reshape."""
    consumers = graph.consumers()
    producers = graph.producers()
    outputs = {v.name for v in graph.outputs}

    def next_view(node: Node) -> Node | None:
        readers = consumers.get(node.outputs[0], [])
        if node.outputs[0] in outputs or len(readers) != 1 or readers[0].op not in _VIEWS:
            return None
        return readers[0]

    replaced: dict[int, Node] = {}
    removed: set[int] = set()
    renamed: dict[str, str] = {}  # the output of a chain that ends where it began -> its input
    for node in graph.nodes:
        before = producers.get(node.inputs[0])
        if node.op not in _VIEWS or (before is not None and before.op in _VIEWS and next_view(before) is node):
            continue  # not a chain's first node
        chain = [node]
        while (following := next_view(chain[-1])) is not None:
            chain.append(following)
        for end in range(len(chain), 1, -1):
            if _keeps_order(graph, chain[:end]):
                last = chain[end - 1]
                shape = graph.values[last.outputs[0]].shape
                if shape == graph.values[node.inputs[0]].shape and last.outputs[0] not in outputs:
                    renamed[last.outputs[0]] = node.inputs[0]
                    removed.update(id(n) for n in chain[:end])
                else:
                    replaced[id(node)] = Node(f"{last.name}/collapsed", Op.RESHAPE, node.inputs[:1], last.outputs,
                                              {"shape": shape})
                    removed.update(id(n) for n in chain[1:end])
                break
    if not replaced and not renamed:
        return graph
    return rebuild(graph, [rename_inputs(replaced.get(id(n), n), renamed) for n in graph.nodes if id(n) not in removed])


def _keeps_order(graph: Graph, chain: list[Node]) -> bool:
    source = graph.values[chain[0].inputs[0]]
    steps = tuple((True, tuple(n.attrs["shape"])) if n.op is Op.RESHAPE else (False, tuple(n.attrs["perm"]))
                  for n in chain)
    return _steps_keep_order(tuple(source.shape), steps)


@functools.lru_cache(maxsize=4096)
def _steps_keep_order(shape: tuple[int, ...], steps: tuple[tuple[bool, tuple[int, ...]], ...]) -> bool:
    """Whether reshapes (True, shape) and transposes (False, perm) of an array of `shape` leave
    its elements in order. Once per chain: a model's graph is optimized a hundred times by the
    substitution search, and MaxViT's window partitions took 9 s of index arrays."""
    if all(reshape for reshape, _ in steps):
        return True
    size = math.prod(shape)
    if size > MAX_ELEMENTS:
        return False
    index = np.arange(size).reshape(shape)
    for reshape, arg in steps:
        index = index.reshape(arg) if reshape else index.transpose(arg)
    return bool(np.array_equal(index.ravel(), np.arange(size)))
