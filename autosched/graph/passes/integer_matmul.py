"""A float product of quantized integers becomes an int8 product: `IntegerMatMul`, by `dot4`.

The importers compute a quantized model's products in float32 (`opset/quantize.py`): A less its
zero point times B less its own, both small integers, times the scales in a QDQ model. Where
the target multiplies bytes four at a time (x86's VNNI), the same product runs as uint8 by
int8 into int32, 64 products per 512-bit instruction where float32 FMA does 16 (onnxruntime's
dynamically quantized BERT layer ran at 2.6x autosched's time with float products, Xeon, 2
threads). A MatMul, or a Gemm of an untransposed A, is rewritten where:

- its weight W [k, n] is a constant Q · s with Q int8 and s one scale or one per column, bit
  for bit (`graph.integers.integer_weights`): a quantized weight less a zero zero point (what onnxruntime's
  quantizer writes by default), dequantized and folded in a QDQ model;
- A = (X - Z) · a with X provably integers within 256 consecutive values (`graph/integers.py`:
  the quantizing chain's clip), Z a scalar (the zero point, a constant or computed at run time
  by DynamicQuantizeLinear; 0 where A is X itself) and a a scalar constant (a QDQ model's
  DequantizeLinear scale; 1 where there is none).

With lo the least value X can hold, X - lo is a byte and
A · W = ((X - lo) · Q - (Z - lo) · colsum(Q)) · a · s: the correction is one vector of the
weight's column sums scaled by a scalar, and it and the scales run in the product's epilogue
(with Gemm's alpha, beta and bias). The int32 sums are exact, where float32's were exact only
below 2^24.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autosched.graph.integers import bytes_and_offset, integer_weights, scaled_operand
from autosched.graph.ir import Graph, Node, Op, Value, toposort
from autosched.graph.passes.rewrite import NewValues, rebuild


@dataclass(frozen=True)
class _Product:
    """A float product the rewrite can take: out = alpha · (A · W) + beta · C, with A the
    activation, W [k, n] a constant and C an optional bias (Gemm's)."""

    a: str
    weight: np.ndarray
    alpha: float = 1.0
    bias: str | None = None
    beta: float = 1.0


def _product(graph: Graph, node: Node) -> _Product | None:
    """`node` as a `_Product`: a MatMul without operand views of a 2-D constant, or a Gemm whose
    A is not transposed and whose B is a constant."""
    if node.op is Op.MATMUL and not node.attrs and len(node.inputs) == 2:
        weight = graph.constants.get(node.inputs[1])
        return _Product(node.inputs[0], weight) if weight is not None and weight.ndim == 2 else None
    if node.op is Op.GEMM and not node.attrs.get("transA", 0) and node.inputs[1] in graph.constants:
        if len(node.inputs) > 2 and node.attrs.get("beta", 1.0) != 1.0 and node.inputs[2] not in graph.constants:
            return None  # beta times a computed C: a node of its own, not worth it
        weight = graph.constants[node.inputs[1]]
        return _Product(node.inputs[0], weight.T if node.attrs.get("transB", 0) else weight,
                        float(node.attrs.get("alpha", 1.0)), node.inputs[2] if len(node.inputs) > 2 else None,
                        float(node.attrs.get("beta", 1.0)))
    return None


def integer_matmul(graph: Graph) -> Graph:
    """`graph` with each product of quantized integers (module doc) an `IntegerMatMul`, its
    zero-point correction and its scales."""
    producers = graph.producers()
    constants = dict(graph.constants)
    value = NewValues(graph)
    replaced: dict[str, list[Node]] = {}
    bytes_of: dict[tuple[str, int], str] = {}  # (X, lo) -> X - lo as uint8
    for node in graph.nodes:
        product = _product(graph, node)
        if product is None or graph.values[product.a].dtype != "float32" or len(graph.values[product.a].shape) < 2:
            continue
        a_scale, centred = scaled_operand(graph, producers, product.a)
        split = bytes_and_offset(graph, producers, centred)
        weights = integer_weights(product.weight)
        if split is None or weights is None:
            continue
        x, lo, zero = split
        integers, w_scale = weights
        emit = _Emitter(node, graph.values[node.outputs[0]], constants, value)
        new, step, constant = emit.nodes, emit.step, emit.constant
        if (x, lo) not in bytes_of:  # one conversion for the products that share A (Q, K and V)
            source = x
            if lo:
                source = value(f"{x}:bytes", graph.values[x].shape, "float32")
                new.append(Node(f"{node.name}/bytes", Op.ADD, (x, constant("least", np.array(-lo, np.float32))),
                                (source,)))
            bytes_of[x, lo] = value(f"{x}:uint8", graph.values[x].shape, "uint8")
            new.append(Node(f"{node.name}/uint8", Op.CAST, (source,), (bytes_of[x, lo],), {"to": "uint8"}))
        sums = value(f"{emit.out.name}:int32", emit.out.shape, "int32")
        new.append(Node(f"{node.name}/integer", Op.INTEGER_MATMUL, (bytes_of[x, lo], constant("int8", integers)),
                        (sums,)))
        scale = (a_scale * product.alpha * w_scale).astype(np.float32)
        column_sums = integers.astype(np.float64).sum(axis=0)
        # the zero point where it is known before run time (0 where A is X itself)
        known = 0.0 if zero is None else float(constants[zero].reshape(())) if zero in constants else None
        scaled = np.any(scale != 1.0)
        stages = [known != lo, scaled, product.bias is not None]  # which steps follow the cast
        result = step("float", Op.CAST, (sums,), {"to": "float32"}, last=not any(stages))
        if stages[0]:
            if known is not None:
                correction = constant("zero_point_sums", ((known - lo) * column_sums).astype(np.float32))
            else:
                assert zero is not None
                if lo:
                    zero = step("zero_point", Op.SUB, (zero, constant("least_value", np.array(lo, np.float32))))
                correction = step("correction", Op.MUL, (zero, constant("column_sums", column_sums.astype(np.float32))))
            result = step("corrected", Op.SUB, (result, correction), last=not any(stages[1:]))
        if scaled:
            result = step("scaled", Op.MUL, (result, constant("scale", scale)), last=not stages[2])
        if product.bias is not None:
            bias = product.bias
            if product.beta != 1.0:
                bias = constant("bias", (product.beta * constants[bias]).astype(np.float32))
            step("biased", Op.ADD, (result, bias), last=True)
        replaced[node.name] = new
    if not replaced:
        return graph
    nodes = [m for node in graph.nodes for m in replaced.get(node.name, (node,))]
    return rebuild(graph, toposort(nodes, [*(v.name for v in graph.inputs), *constants]), constants, value.values)


class _Emitter:
    """The nodes that replace one product, each named after it; the last writes its output."""

    def __init__(self, node: Node, out: Value, constants: dict[str, np.ndarray], value: NewValues) -> None:
        self.node, self.out, self.constants, self.value = node, out, constants, value
        self.nodes: list[Node] = []

    def step(self, label: str, op: Op, inputs: tuple[str, ...], attrs: dict | None = None, last: bool = False) -> str:
        name = self.out.name if last else self.value(f"{self.out.name}:{label}", self.out.shape, "float32")
        self.nodes.append(Node(f"{self.node.name}/{label}", op, inputs, (name,), attrs or {}))
        return name

    def constant(self, label: str, array: np.ndarray) -> str:
        name = self.value(f"{self.out.name}:{label}", array.shape, array.dtype.name)
        self.constants[name] = array
        return name
