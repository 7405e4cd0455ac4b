"""Convolutions and pools over one spatial axis as 2-D ones of height 1.

Audio and sequence models (keyword spotting, wav2vec's feature encoder, temporal convolution
networks) convolve and pool [N, C, L] tensors. The compiled convolutions and pools are 2-D, with
their layouts, templates and tuned records: a 1-D one is the same computation on [N, C, 1, L]
with a 1 × K window, so it is rewritten as one, between two Reshapes that move nothing (a Reshape of an
intermediate is a view, no kernel). The elementwise ops that follow it alone (its activation)
move inside, so the Reshape back comes after them, and a lifted op that reads another's result
reads its 2-D value: the tensors between them stay in channel blocks. It runs after
BatchNorm folding, which merges into the 1-D convolution as into any other.
"""
from __future__ import annotations

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.rewrite import fresh_name, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import kind_of

#: the windowed ops lifted, and whether their second input is a weight to lift with them
_LIFTED = {Op.CONV: True, Op.MAX_POOL: False, Op.AVERAGE_POOL: False}


#: reductions whose result over the length of a lifted op's output is taken from its 2-D value
_REDUCTIONS = (Op.REDUCE_MAX, Op.REDUCE_MEAN, Op.REDUCE_SUM)


def _over_length(node: Node, shape: tuple[int, ...]) -> bool:
    """Whether the reduction runs over the last axis of a 3-D tensor alone."""
    axes = {a % len(shape) for a in node.attrs.get("axes", ())}
    return axes == {2} and set(node.attrs) <= {"axes", "keepdims"}


def _lifted_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against [N, C, L], as it broadcasts against [N, C, 1, L]."""
    full = (1,) * (3 - len(shape)) + tuple(shape)
    return (*full[:2], 1, full[2])


def _lifted_along(node: Node, graph: Graph, twins: dict[str, str], constants: dict) -> dict | None:
    """The attributes `node` takes on lifted operands, where it reads a lifted result and can run
    on 2-D values: a slice (height kept whole), or an elementwise op whose other operands are
    constants or tensors of its output's shape; else None."""
    if len(node.outputs) != 1 or not any(name in twins for name in node.inputs):
        return None
    out = graph.values[node.outputs[0]].shape
    if len(out) != 3:
        return None
    if node.op is Op.SLICE and set(node.attrs) <= {"starts", "ends", "steps"}:
        at = node.attrs
        return {"starts": (*at["starts"][:2], 0, at["starts"][2]), "ends": (*at["ends"][:2], 1, at["ends"][2]),
                "steps": (*at["steps"][:2], 1, at["steps"][2])}
    if kind_of(node.op) is not OpKind.ELEMWISE:
        return None
    for name in node.inputs:
        shape = graph.values[name].shape
        if name not in twins and name not in constants and shape != out:
            return None  # a computed tensor broadcast along some axis: left as it is
        if name in constants and len(shape) > 3:
            return None
    return dict(node.attrs)


def lift_1d(graph: Graph) -> Graph:
    """`graph` with every Conv, MaxPool and AveragePool of a 3-D input computed as a 2-D one of height 1."""
    if not any(n.op in _LIFTED and len(graph.values[n.inputs[0]].shape) == 3 for n in graph.nodes):
        return graph
    constants = dict(graph.constants)
    taken: set[str] = set(graph.values) | set(constants)
    consumers, outputs = graph.consumers(), {v.name for v in graph.outputs}
    moved: set[int] = set()  # elementwise nodes moved inside, by id
    twins: dict[str, str] = {}  # a lifted op's 1-D result -> the 2-D value it is a view of
    new_values: list[Value] = []
    nodes: list[Node] = []

    def fresh(base: str, shape: tuple[int, ...], dtype: str) -> str:
        name = fresh_name(base, taken)
        taken.add(name)
        new_values.append(Value(name, shape, dtype))
        return name

    def reshaped_constant(name: str, shape: tuple[int, ...]) -> str:
        array = fresh_name(f"{name}_2d", taken)
        taken.add(array)
        constants[array] = constants[name].reshape(shape)
        new_values.append(Value(array, shape, graph.values[name].dtype))
        return array

    def unary_reader(value: str) -> Node | None:
        """The elementwise node that alone reads `value` (no graph output), its other operands scalars."""
        readers = consumers.get(value, [])
        if value in outputs or len(readers) != 1 or kind_of(readers[0].op) is not OpKind.ELEMWISE:
            return None
        node = readers[0]
        if node.inputs[0] != value or len(node.outputs) != 1 or any(
                n not in constants or constants[n].size != 1 for n in node.inputs[1:]):
            return None
        return node

    for node in graph.nodes:
        x = graph.values[node.inputs[0]]
        if id(node) in moved:
            continue
        if node.op in _REDUCTIONS and x.name in twins and _over_length(node, x.shape):
            # over the length of a lifted op's result: over the columns of its 2-D value, which
            # keeps its channel blocks (PointNet's max over 1,024 points of 1,024 channels was a
            # 4 MB layout transform, 0.35 ms of 1.75, to reduce the plain copy)
            y = graph.values[node.outputs[0]]
            pooled = fresh(f"{y.name}_2d", (x.shape[0], x.shape[1], 1, 1), y.dtype)
            nodes.append(Node(node.name, node.op, (twins[x.name],), (pooled,), {**node.attrs, "axes": (2, 3), "keepdims": 1}))
            nodes.append(Node(f"{node.name}_output", Op.RESHAPE, (pooled,), (y.name,), {"shape": y.shape}))
            continue
        lifted = _lifted_along(node, graph, twins, constants)
        if lifted is not None:
            # a slice or an elementwise op of lifted results runs on their 2-D values, so that the
            # tensors between lifted ops stay in channel blocks (WaveNet's gated units: the dilated
            # convolution's output cut in two, tanh times sigmoid, added to the residual)
            lifted_operands: list[str] = []
            for name in node.inputs:
                if name in twins:
                    lifted_operands.append(twins[name])
                elif name in constants:
                    lifted_operands.append(reshaped_constant(name, _lifted_shape(graph.values[name].shape)))
                else:
                    v = graph.values[name]
                    lifted_operands.append(fresh(f"{name}_2d", _lifted_shape(v.shape), v.dtype))
                    nodes.append(Node(f"{node.name}_input{len(lifted_operands)}_2d", Op.RESHAPE, (name,), (lifted_operands[-1],),
                                      {"shape": _lifted_shape(v.shape)}))
            y = graph.values[node.outputs[0]]
            y2 = fresh(f"{y.name}_2d", _lifted_shape(y.shape), y.dtype)
            nodes.append(Node(node.name, node.op, tuple(lifted_operands), (y2,), lifted))
            nodes.append(Node(f"{node.name}_output_1d", Op.RESHAPE, (y2,), (y.name,), {"shape": y.shape}))
            twins[y.name] = y2
            continue
        if node.op not in _LIFTED or len(x.shape) != 3:
            nodes.append(node)
            continue
        n, c, length = x.shape
        y = graph.values[node.outputs[0]]
        x2 = twins.get(x.name, "")
        if not x2:
            x2 = fresh(f"{x.name}_2d", (n, c, 1, length), x.dtype)
            nodes.append(Node(f"{node.name}_input_2d", Op.RESHAPE, (x.name,), (x2,), {"shape": (n, c, 1, length)}))
        operands: tuple[str, ...] = ()
        if _LIFTED[node.op]:
            w_name, *bias = node.inputs[1:]
            w = graph.values[w_name]
            w_shape = (w.shape[0], w.shape[1], 1, w.shape[2])
            if w_name in constants:
                w2 = reshaped_constant(w_name, w_shape)
            else:
                w2 = fresh(f"{w_name}_2d", w_shape, w.dtype)
                nodes.append(Node(f"{node.name}_weight_2d", Op.RESHAPE, (w_name,), (w2,), {"shape": w_shape}))
            operands = (w2, *bias)
        y2 = fresh(f"{y.name}_2d", (y.shape[0], y.shape[1], 1, y.shape[2]), y.dtype)
        (stride,), (dilation,), (begin, end) = node.attrs["strides"], node.attrs["dilations"], node.attrs["pads"]
        attrs = {**node.attrs, "strides": (1, stride), "dilations": (1, dilation), "pads": (0, begin, 0, end)}
        if "kernel_shape" in attrs:
            attrs["kernel_shape"] = (1, *attrs["kernel_shape"])
        nodes.append(Node(node.name, node.op, (x2, *operands), (y2,), attrs))
        last, last_2d = node, y2
        while (reader := unary_reader(last.outputs[0])) is not None:
            out = graph.values[reader.outputs[0]]
            out_2d = fresh(f"{out.name}_2d", (out.shape[0], out.shape[1], 1, out.shape[2]), out.dtype)
            nodes.append(Node(reader.name, reader.op, (last_2d, *reader.inputs[1:]), (out_2d,), reader.attrs))
            moved.add(id(reader))
            last, last_2d, y = reader, out_2d, out
        nodes.append(Node(f"{last.name}_output_1d", Op.RESHAPE, (last_2d,), (y.name,), {"shape": y.shape}))
        twins[y.name] = last_2d
    return rebuild(graph, nodes, constants, new_values)
