"""A float MatMul of quantized integers becomes an int8 product: `IntegerMatMul`, by `dot4`.

The importers compute a quantized model's products in float32 (`opset/quantize.py`): A less its
zero point times B less its own, both small integers. Where the target multiplies bytes four
at a time (x86's VNNI), the same product runs as uint8 by int8 into int32, 64 products per
512-bit instruction where float32 FMA does 16 (onnxruntime's dynamically quantized BERT layer
ran at 2.6x autosched's time with float products, Xeon, 2 threads). The rewrite needs:

- B a 2-D constant of integers within int8's range (a quantized weight less a zero zero point,
  what onnxruntime's quantizer writes by default);
- A = X - Z with X provably integers within 256 consecutive values (`graph/integers.py`: the
  quantizing chain's clip) and Z a scalar (its zero point, a constant or computed at run time
  by DynamicQuantizeLinear), or A itself such integers.

With lo the least value X can hold, X - lo is a byte and A · B = (X - lo) · B - (Z - lo) · colsum(B):
the correction is one vector of the weight's column sums scaled by a scalar, subtracted in
the product's epilogue. The int32 sums are exact, where float32's were exact only below 2^24.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.integers import integer_range
from autosched.graph.ir import Graph, Node, Op, toposort
from autosched.graph.passes.rewrite import NewValues, rebuild

#: values a byte holds
BYTE_VALUES = 256


def integer_matmul(graph: Graph) -> Graph:
    """`graph` with each MatMul of quantized integers (module doc) an `IntegerMatMul` and its
    zero-point correction."""
    producers = graph.producers()
    constants = dict(graph.constants)
    value = NewValues(graph)
    replaced: dict[str, list[Node]] = {}
    bytes_of: dict[tuple[str, int], str] = {}  # (X, lo) -> X - lo as uint8
    for node in graph.nodes:
        if node.op is not Op.MATMUL or node.attrs or len(node.inputs) != 2:
            continue
        a, b = (graph.values[name] for name in node.inputs)
        weight = constants.get(b.name)
        if weight is None or weight.ndim != 2 or a.dtype != "float32" or len(a.shape) < 2:
            continue
        if not (np.all(weight == np.round(weight)) and weight.min() >= -128 and weight.max() <= 127):
            continue
        split = _bytes_and_offset(graph, producers, a.name)
        if split is None:
            continue
        x, lo, zero = split
        out = graph.values[node.outputs[0]]
        new: list[Node] = []
        if (x, lo) not in bytes_of:  # one conversion for the products that share A (Q, K and V)
            source = x
            if lo:
                source = value(f"{x}:bytes", graph.values[x].shape, "float32")
                constants[offset := value(f"{x}:least", (), "float32")] = np.array(-lo, np.float32)
                new.append(Node(f"{node.name}/bytes", Op.ADD, (x, offset), (source,)))
            bytes_of[x, lo] = value(f"{x}:uint8", graph.values[x].shape, "uint8")
            new.append(Node(f"{node.name}/uint8", Op.CAST, (source,), (bytes_of[x, lo],), {"to": "uint8"}))
        as_bytes = bytes_of[x, lo]
        constants[int8 := value(f"{b.name}:int8", b.shape, "int8")] = weight.astype(np.int8)
        product = value(f"{out.name}:int32", out.shape, "int32")
        new.append(Node(f"{node.name}/integer", Op.INTEGER_MATMUL, (as_bytes, int8), (product,)))
        sums = weight.astype(np.float64).sum(axis=0)
        # the zero point where it is known before run time (0 where A is X itself)
        known = 0.0 if zero is None else float(constants[zero].reshape(())) if zero in constants else None
        if known is not None and known == lo:  # X itself, unshifted: no correction
            new.append(Node(f"{node.name}/float", Op.CAST, (product,), (out.name,), {"to": "float32"}))
            replaced[node.name] = new
            continue
        as_float = value(f"{out.name}:float", out.shape, "float32")
        new.append(Node(f"{node.name}/float", Op.CAST, (product,), (as_float,), {"to": "float32"}))
        correction = value(f"{out.name}:zero_point_sums", (weight.shape[1],), "float32")
        if known is not None:
            constants[correction] = ((known - lo) * sums).astype(np.float32)
        else:
            assert zero is not None
            column_sums = value(f"{b.name}:column_sums", (weight.shape[1],), "float32")
            constants[column_sums] = sums.astype(np.float32)
            if lo:
                less = value(f"{zero}:less_least", graph.values[zero].shape, "float32")
                constants[least := value(f"{zero}:least", (), "float32")] = np.array(lo, np.float32)
                new.append(Node(f"{node.name}/zero_point", Op.SUB, (zero, least), (less,)))
                zero = less
            new.append(Node(f"{node.name}/correction", Op.MUL, (zero, column_sums), (correction,)))
        new.append(Node(f"{node.name}/corrected", Op.SUB, (as_float, correction), (out.name,)))
        replaced[node.name] = new
    if not replaced:
        return graph
    nodes = [m for node in graph.nodes for m in replaced.get(node.name, (node,))]
    return rebuild(graph, toposort(nodes, [*(v.name for v in graph.inputs), *constants]), constants, value.values)


def _bytes_and_offset(graph: Graph, producers: dict[str, Node], name: str) -> tuple[str, int, str | None] | None:
    """(X, lo, Z) with value `name` = X - Z, X integers within lo .. lo + 255 and Z a scalar
    float value (None: 0), or None where `name` is not of that form."""
    bounds = integer_range(graph, producers, name)
    if bounds is not None and bounds[1] - bounds[0] < BYTE_VALUES:
        return name, bounds[0], None  # A itself
    node = producers.get(name)
    if node is None or node.op is not Op.SUB or len(node.inputs) != 2:
        return None
    x, zero = node.inputs
    bounds = integer_range(graph, producers, x)
    z = graph.values[zero]
    if bounds is None or bounds[1] - bounds[0] >= BYTE_VALUES or z.size != 1 or z.dtype != "float32":
        return None
    if graph.values[x].shape != graph.values[name].shape:
        return None  # the zero point broadcasts X, which the product would then read whole
    return x, bounds[0], zero
