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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autosched.graph.integers import bytes_and_offset, integer_weights, scaled_operand
from autosched.graph.ir import Graph, Node, Op, toposort
from autosched.graph.passes.rewrite import Emitter, NewValues, rebuild


@dataclass(frozen=True)
class _Product:
    """A float product the rewrite can take: out = alpha · (A · W) + beta · C, with A the
    activation, W [k, n] a constant and C an optional bias (Gemm's)."""

    a: str
    weight: np.ndarray
    alpha: float = 1.0
    bias: str | None = None
    beta: float = 1.0


def as_bytes(emit: Emitter, graph: Graph, producers: dict[str, Node], name: str, lo: int,
             made: dict[tuple[str, int], str]) -> str:
    """X (value `name`) - lo as uint8, X holding integers from lo on: the uint8 value X was cast
    from where there is one, else one conversion for all the products that read X (BERT's Q,
    K and V projections), kept in `made`."""
    x = graph.values[name]
    cast = producers.get(name)
    if lo == 0 and cast is not None and cast.op is Op.CAST:
        origin = graph.values[cast.inputs[0]]
        if origin.dtype == "uint8" and origin.shape == x.shape:
            return origin.name  # the bytes X was cast from (a QOperator model's activations)
    if (x.name, lo) not in made:
        source = x.name
        if lo:
            source = emit.value(f"{x.name}:bytes", x.shape, "float32")
            emit.nodes.append(Node(f"{emit.node.name}/bytes", Op.ADD,
                                   (x.name, emit.constant("least", np.array(-lo, np.float32))), (source,)))
        made[x.name, lo] = emit.value(f"{x.name}:uint8", x.shape, "uint8")
        emit.nodes.append(Node(f"{emit.node.name}/uint8", Op.CAST, (source,), (made[x.name, lo],), {"to": "uint8"}))
    return made[x.name, lo]


@dataclass(frozen=True)
class Offset:
    """What the int8 product's sums carry beyond the float product's: (Z - lo) times each
    output's weight sum, Z the zero point (None: 0; a constant, or a value computed at run time)."""

    lo: int
    zero: str | None
    weight_sums: np.ndarray  # int64, one per output column or channel
    zero_shape: tuple[int, ...] = ()  # the zero point's (one value)


def finish_integer_product(emit: Emitter, sums: str, offset: Offset, scale: np.ndarray, bias: np.ndarray | None,
                           shaped: Callable[[np.ndarray], np.ndarray]) -> None:
    """The steps from the int8 product's int32 `sums` to the float product's output: the
    offset taken off in int32 (exact, as onnxruntime's accumulator; the bytes' sums, larger than
    the centred ones, exceed float32's 2^24 on a wide reduction), with the bias where it is a
    constant of integers and no scale comes between (QOperator's int32 bias), then the cast,
    the scale and a float bias. `shaped` gives a per-output vector the output's broadcast shape."""
    constants = emit.constants
    known = 0.0 if offset.zero is None else float(constants[offset.zero].reshape(())) if offset.zero in constants else None
    scaled = bool(np.any(scale != 1.0))
    int_bias = None
    if bias is not None and not scaled and np.all(bias == np.round(bias)) and np.all(np.abs(bias) < 2**31):
        int_bias = bias.astype(np.int64)
        bias = None
    subtrahend: str | None = None
    if known is not None:
        total = (int(known) - offset.lo) * offset.weight_sums - (0 if int_bias is None else int_bias)
        if np.any(total):
            subtrahend = emit.constant("offset", shaped(total.astype(np.int32)))
    else:
        assert offset.zero is not None
        zero = emit.step("zero_point", Op.CAST, (offset.zero,), {"to": "int32"}, dtype="int32",
                         shape=offset.zero_shape)
        if offset.lo:
            zero = emit.step("zero_point_less_least", Op.SUB, (zero, emit.constant("least", np.array(offset.lo, np.int32))),
                             dtype="int32", shape=offset.zero_shape)
        subtrahend = emit.step("offset", Op.MUL, (zero, emit.constant("weight_sums", shaped(offset.weight_sums.astype(np.int32)))),
                               dtype="int32", shape=shaped(offset.weight_sums).shape)
        if int_bias is not None:
            subtrahend = emit.step("offset_less_bias", Op.SUB, (subtrahend, emit.constant("bias", shaped(int_bias.astype(np.int32)))),
                                   dtype="int32", shape=shaped(offset.weight_sums).shape)
    steps = [scaled, bias is not None]
    if subtrahend is not None:
        sums = emit.step("centred", Op.SUB, (sums, subtrahend), dtype="int32")
    result = emit.step("float", Op.CAST, (sums,), {"to": "float32"}, last=not any(steps))
    if scaled:
        result = emit.step("scaled", Op.MUL, (result, emit.constant("scale", shaped(scale))), last=not steps[1])
    if bias is not None:
        emit.step("biased", Op.ADD, (result, emit.constant("bias", shaped(bias.astype(np.float32)))), last=True)


def _product(graph: Graph, node: Node) -> _Product | None:
    """`node` as a `_Product`: a MatMul without operand views of a 2-D constant, or a Gemm whose
    A is not transposed and whose B is a constant."""
    if node.op is Op.MATMUL and not node.attrs and len(node.inputs) == 2:
        weight = graph.constants.get(node.inputs[1])
        return _Product(node.inputs[0], weight) if weight is not None and weight.ndim == 2 else None
    if (node.op is Op.GEMM and not node.attrs.get("transA", 0)
            and all(name in graph.constants for name in node.inputs[1:])):  # B and C constants
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
        # the weight factored only for a quantized activation: a float model's weights are not
        weights = None if split is None else integer_weights(product.weight)
        if split is None or weights is None:
            continue
        x, lo, zero = split
        integers, w_scale = weights
        emit = Emitter(node, graph.values[node.outputs[0]], constants, value)
        new, constant = emit.nodes, emit.constant
        sums = value(f"{emit.out.name}:int32", emit.out.shape, "int32")
        new.append(Node(f"{node.name}/integer", Op.INTEGER_MATMUL,
                        (as_bytes(emit, graph, producers, x, lo, bytes_of), constant("int8", integers)), (sums,)))
        bias = None if product.bias is None else (product.beta * constants[product.bias]).astype(np.float32)
        finish_integer_product(emit, sums, Offset(lo, zero, integers.astype(np.int64).sum(axis=0), graph.values[zero].shape if zero else ()),
                               (a_scale * product.alpha * w_scale).astype(np.float32), bias, lambda v: v)
        replaced[node.name] = new
    if not replaced:
        return graph
    nodes = [m for node in graph.nodes for m in replaced.get(node.name, (node,))]
    return rebuild(graph, toposort(nodes, [*(v.name for v in graph.inputs), *constants]), constants, value.values)
