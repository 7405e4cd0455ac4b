"""Fold a LayerNorm written out in primitive ops into one LayerNormalization.

Below opset 17 exporters write LayerNorm as
    m = ReduceMean(x); d = x - m; v = ReduceMean(d·d); y = d / Sqrt(v + ε) [· γ] [+ β]
(the square as Pow(d, 2) until `reduce_pow` has run). As nine kernels that is
nine passes over the activation and two reductions the fuser cannot merge; as one
LayerNormalization it is one kernel with a single pass for the statistics.
"""

from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.rewrite import fresh_name, rebuild


def fold_layer_norm(graph: Graph) -> Graph:
    """`graph` with every decomposed LayerNorm over trailing axes replaced by one node."""
    while True:
        match = _Match(graph)  # once per graph: per division it made ViTs' optimize quadratic
        folded = next((g for div in graph.nodes if div.op is Op.DIV
                       for g in [_fold_one(graph, div, match)] if g is not None), None)
        if folded is None:
            return graph
        graph = folded


def _fold_one(graph: Graph, div: Node, match: _Match) -> Graph | None:
    found = _match(graph, div, match)
    if found is None:
        return None
    x, epsilon, axis, removed = found
    normalized = graph.values[x].shape[axis:]
    out = div.outputs[0]
    params: list[str] = []
    for op in (Op.MUL, Op.ADD):  # γ, then β
        follower = match.sole_reader(out)
        param = match.parameter(follower, op, out, normalized) if follower is not None else None
        if follower is None or param is None:
            break
        params.append(param)
        removed.append(follower)
        out = follower.outputs[0]
    constants = dict(graph.constants)
    new_values: list[Value] = []
    if not params:  # no γ: LayerNormalization needs one
        name = fresh_name(f"{div.name}_scale", {**graph.values, **constants})
        dtype = graph.values[x].dtype
        constants[name] = np.ones(normalized, dtype=dtype)
        new_values.append(Value(name, normalized, dtype))
        params.append(name)
    fused = Node(f"{div.name}_layer_norm", Op.LAYER_NORM, (x, *params), (out,), {"axis": axis, "epsilon": epsilon})
    gone = {id(n) for n in removed}
    nodes = [fused if n is div else n for n in graph.nodes if n is div or id(n) not in gone]
    return rebuild(graph, nodes, constants, new_values)


def _match(graph: Graph, div: Node, match: _Match) -> tuple[str, float, int, list[Node]] | None:
    """(x, ε, first normalized axis, the pattern's nodes) when `div` ends d / Sqrt(mean(d·d) + ε)
    with d = x - mean(x), every intermediate read only inside the pattern."""
    d, sqrt_out = div.inputs
    sqrt = match.sole(sqrt_out, Op.SQRT)
    add = match.sole(sqrt.inputs[0], Op.ADD) if sqrt else None
    eps_var = match.constant_and_other(add) if add else None
    if sqrt is None or add is None or eps_var is None:
        return None
    epsilon, var_out = eps_var
    var_mean = match.sole(var_out, Op.REDUCE_MEAN)
    square = match.sole(var_mean.inputs[0], Op.MUL) if var_mean else None
    sub = match.producers.get(d)
    if var_mean is None or square is None or square.inputs != (d, d) or sub is None or sub.op is not Op.SUB:
        return None
    x, mean_out = sub.inputs
    mean = match.sole(mean_out, Op.REDUCE_MEAN)
    if mean is None or mean.inputs[0] != x or not match.private(d) or not match.only_read_by(d, {id(square), id(div)}):
        return None
    axis = _trailing_axis(graph, x, mean, var_mean)
    return None if axis is None else (x, epsilon, axis, [div, sqrt, add, var_mean, square, sub, mean])


class _Match:
    """Lookups over one graph for walking a pattern backwards from its last node."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}

    def private(self, value: str) -> bool:
        return value not in self.outputs

    def sole(self, value: str, op: Op) -> Node | None:
        """The `op` node writing `value` when `value` has that one reader and is no graph output."""
        node = self.producers.get(value)
        if node is None or node.op is not op or not self.private(value) or len(self.consumers.get(value, [])) != 1:
            return None
        return node

    def sole_reader(self, value: str) -> Node | None:
        readers = self.consumers.get(value, [])
        return readers[0] if len(readers) == 1 and self.private(value) else None

    def only_read_by(self, value: str, ids: set[int]) -> bool:
        return {id(n) for n in self.consumers.get(value, [])} == ids

    def constant_and_other(self, node: Node) -> tuple[float, str] | None:
        """(c, other) for a binary node reading a one-element float constant c and `other`."""
        for c, other in (node.inputs, node.inputs[::-1]):
            array = self.graph.constants.get(c)
            if array is not None and array.size == 1 and array.dtype.kind == "f" and other not in self.graph.constants:
                return float(array.reshape(())), other
        return None

    def parameter(self, node: Node, op: Op, value: str, normalized: tuple[int, ...]) -> str | None:
        """The constant operand of an `op` node on `value` that broadcasts over the normalized
        axes only (a per-row constant would not be a LayerNorm's γ or β)."""
        if node.op is not op:
            return None
        other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
        array = self.graph.constants.get(other)
        if array is None or other == value or array.ndim > len(normalized):
            return None
        try:
            shape = np.broadcast_shapes(array.shape, normalized)
        except ValueError:
            return None
        return other if shape == normalized else None


def _trailing_axis(graph: Graph, x: str, mean: Node, var_mean: Node) -> int | None:
    """The first axis when both means reduce the same trailing axes with kept dims."""
    rank = len(graph.values[x].shape)
    axes = tuple(sorted(mean.attrs["axes"]))
    if (not axes or axes != tuple(range(axes[0], rank)) or tuple(sorted(var_mean.attrs["axes"])) != axes
            or not mean.attrs["keepdims"] or not var_mean.attrs["keepdims"]):
        return None
    return axes[0]
