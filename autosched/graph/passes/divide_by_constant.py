"""Division by a float constant as multiplication by its reciprocal.

A vector division costs several times a multiplication (VDIVPS: one per 3.5-5 cycles on the
cores measured, where two FMAs issue each cycle), and exporters divide by constants: the erf
GELU's x / √2 in every BERT, ViT and ConvNeXt MLP, attention's scores / √d. The product
differs from the correctly rounded quotient by at most one and a half units in the last
place (the reciprocal is rounded once, the product once); where the constant is a power of
two, not at all. ONNX Runtime's GELU kernels multiply by 1/√2 too. A value that is rounded to
an integer keeps the divisions it is computed from elementwise (QuantizeLinear's x / scale,
DynamicQuantizeLinear's scale (max - min) / 255): there one unit in the last place moves a
value on a rounding boundary to the next integer, a whole quantization step, and the model
would no longer compute what an int8 runtime does.
"""

from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op, Value
from autosched.graph.passes.rewrite import fresh_name, rebuild
from autosched.opset.record import OpKind
from autosched.opset.registry import lookup

#: ops that round their input to an integer
ROUNDING = frozenset({Op.ROUND, Op.FLOOR, Op.CEIL})


def divide_by_constant(graph: Graph) -> Graph:
    """`graph` with each float Div whose divisor is a constant of finite, nonzero elements
    (a normal reciprocal) rewritten as a Mul by the reciprocals."""
    taken = set(graph.values) | set(graph.constants)
    constants = dict(graph.constants)
    reciprocals: dict[str, str] = {}  # divisor constant -> its reciprocal's name
    rounded = _rounded(graph)
    nodes: list[Node] = []
    for node in graph.nodes:
        divisor = node.inputs[1] if node.op is Op.DIV and len(node.inputs) == 2 and node.outputs[0] not in rounded else ""
        inverse = None if not divisor or divisor in reciprocals else _reciprocal(graph, node, divisor)
        if inverse is not None:
            name = fresh_name(f"{divisor}_reciprocal", taken)
            taken.add(name)
            constants[name] = inverse
            reciprocals[divisor] = name
        if divisor in reciprocals:
            nodes.append(Node(node.name, Op.MUL, (node.inputs[0], reciprocals[divisor]), node.outputs, node.attrs))
        else:
            nodes.append(node)
    if not reciprocals:
        return graph
    new_values = [Value(r, graph.values[d].shape, graph.values[d].dtype) for d, r in reciprocals.items()]
    return rebuild(graph, nodes, constants, new_values)


def _rounded(graph: Graph) -> set[str]:
    """The values that a rounding op's input is computed from through elementwise ops alone."""
    producers = {out: node for node in graph.nodes for out in node.outputs}
    found: set[str] = set()
    todo = [name for node in graph.nodes if node.op in ROUNDING for name in node.inputs]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        producer = producers.get(name)
        if producer is not None and lookup(producer.op).kind is OpKind.ELEMWISE:
            todo.extend(producer.inputs)
    return found


def _reciprocal(graph: Graph, node: Node, divisor: str) -> np.ndarray | None:
    """The divisor's reciprocals where `node` divides floats by a constant whose reciprocals are
    all finite and normal (so no zero, infinite, NaN or huge divisor), else None."""
    if divisor not in graph.constants or not graph.values[node.outputs[0]].dtype.startswith("float"):
        return None
    value = np.asarray(graph.constants[divisor])
    if value.dtype.kind != "f" or value.size == 0:
        return None
    with np.errstate(all="ignore"):
        inverse = (np.ones((), value.dtype) / value).astype(value.dtype)
    return inverse if bool(np.all(np.isfinite(inverse) & (np.abs(inverse) >= np.finfo(value.dtype).tiny))) else None
