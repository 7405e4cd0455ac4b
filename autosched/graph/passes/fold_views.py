"""Fold Reshape, Transpose and Split chains into the MatMul that reads them (`autosched.graph.views`).

A chain is folded when each of its nodes has that MatMul as its only reader and its output is
no graph output: then the copy exists only to feed the MatMul, which can read the chain's
source through the view instead. Constant operands are left alone (constant folding already
made them plain arrays, and a weight's layout is the packing's business), and so is the
activation of a MatMul with a constant B (see below).
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op
from autosched.graph.passes.dce import eliminate_dead_code
from autosched.graph.passes.rewrite import rebuild
from autosched.graph.views import VIEWS_ATTR, operand_views

_VIEW_OPS = {Op.RESHAPE: "reshape", Op.TRANSPOSE: "transpose", Op.SPLIT: "slice"}
#: the longest chain folded: attention's are Reshape then Transpose, or the reverse, after up to
#: two Splits of merged projections (Q and K split from V, then from each other)
MAX_STEPS = 4


def _step(producer: Node, value: str) -> tuple[str, tuple[int, ...]]:
    """The view step that `producer` (a view op) applies to give `value`."""
    kind = _VIEW_OPS[producer.op]
    if kind == "reshape":
        return kind, tuple(int(v) for v in producer.attrs["shape"])
    if kind == "transpose":
        return kind, tuple(int(v) for v in producer.attrs["perm"])
    sizes = [int(n) for n in producer.attrs["split"]]
    k = producer.outputs.index(value)
    start = sum(sizes[:k])
    return kind, (int(producer.attrs["axis"]), start, start + sizes[k])


def fold_views(graph: Graph, dense_in_place: bool = True) -> Graph:
    """`graph` with each MatMul reading through its operands' Reshape/Transpose chains; with
    `dense_in_place` (CPU targets), a MatMul of a constant B keeps reading its A as it is."""
    producers = graph.producers()
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    nodes = []
    changed = False
    for node in graph.nodes:
        if node.op is not Op.MATMUL or len(node.inputs) != 2:
            nodes.append(node)
            continue
        inputs, views = list(node.inputs), list(operand_views(node.attrs))
        # a dense layer (constant B) reads its A in place, row by row, with no copy at all; a
        # view would make it pack A (BERT's output projection, 1 thread: 0.59 -> 0.77 ms,
        # against 0.016 ms for the Transpose and Reshape it saves)
        slots = (1,) if dense_in_place and node.inputs[1] in graph.constants else (0, 1)
        for slot in slots:
            name = node.inputs[slot]
            source, steps = name, list(views[slot])
            while len(steps) < MAX_STEPS and source not in outputs:
                producer = producers.get(source)
                if producer is None or producer.op not in _VIEW_OPS or len(consumers.get(source, [])) != 1:
                    break
                step = _step(producer, source)
                if step[0] == "slice" and steps and steps[0][0] == "slice" and steps[0][1][0] == step[1][0]:
                    # a part of a part: one slice of the source
                    axis, start, _ = step[1]
                    steps[0] = ("slice", (axis, start + steps[0][1][1], start + steps[0][1][2]))
                else:
                    steps.insert(0, step)
                source = producer.inputs[0]
            if source != name and source not in graph.constants:
                inputs[slot], views[slot] = source, tuple(steps)
                changed = True
        if tuple(inputs) == node.inputs:
            nodes.append(node)
        else:
            attrs = {**node.attrs, VIEWS_ATTR: tuple(views)}
            nodes.append(Node(node.name, node.op, tuple(inputs), node.outputs, attrs))
    if not changed:
        return graph
    # the folded chains now have no reader: drop them with every other dead node
    return eliminate_dead_code(rebuild(graph, nodes))
