"""Which float values of a graph hold integers, and within what bounds.

A quantized model computes on integers written as floats: QuantizeLinear rounds, adds its zero
point and clips to the integer type, and its successors subtract the zero point again. Passes
that give such values their integer form back (`remove_identity`'s round trips,
`integer_matmul`'s int8 products) ask here what a value provably holds, looking a few
producers up.
"""
from __future__ import annotations

import numpy as np

from autosched.graph.ir import Graph, Node, Op

#: producers looked through before giving up
DEPTH = 5
#: ops whose output holds values of their first input only (moved, or the largest of some)
_SAME_VALUES = (Op.LAYOUT_TRANSFORM, Op.RESHAPE, Op.TRANSPOSE, Op.MAX_POOL, Op.IDENTITY)


def integral(graph: Graph, producers: dict[str, Node], name: str, depth: int = DEPTH) -> bool:
    """Whether value `name` holds integers only: a constant of integers, a rounding, an integer
    value cast, or sums, differences and clips (to integer bounds) of such, `depth` levels down."""
    if name in graph.constants:
        array = graph.constants[name]
        return bool(np.all(np.isfinite(array)) and np.all(array == np.round(array)))
    node = producers.get(name)
    if node is None or depth == 0:
        return False
    if node.op in (Op.ROUND, Op.FLOOR, Op.CEIL):
        return True
    if node.op in _SAME_VALUES:
        return integral(graph, producers, node.inputs[0], depth - 1)
    if node.op is Op.CAST:
        return np.dtype(graph.values[node.inputs[0]].dtype).kind in "iub"
    if node.op in (Op.ADD, Op.SUB):
        return all(integral(graph, producers, i, depth - 1) for i in node.inputs)
    if node.op is Op.CLIP:
        bounds = [node.attrs.get("min", 0.0), node.attrs.get("max", 0.0)]
        return all(float(b).is_integer() for b in bounds) and integral(graph, producers, node.inputs[0], depth - 1)
    return False


def integer_range(graph: Graph, producers: dict[str, Node], name: str, depth: int = DEPTH) -> tuple[int, int] | None:
    """(least, greatest) integer value `name` can hold, where it holds integers only and both
    bounds are known: a constant's, an integer type's, a clip's, or those of sums and
    differences of such; else None."""
    if not integral(graph, producers, name, depth):
        return None
    if name in graph.constants:
        array = graph.constants[name]
        return (int(array.min()), int(array.max())) if array.size else None
    node = producers[name]
    if node.op in _SAME_VALUES:
        return integer_range(graph, producers, node.inputs[0], depth - 1)
    if node.op is Op.CAST:
        kind = np.dtype(graph.values[node.inputs[0]].dtype)
        return (0, 1) if kind.kind == "b" else (int(np.iinfo(kind).min), int(np.iinfo(kind).max))
    if node.op is Op.CLIP:
        if "min" not in node.attrs or "max" not in node.attrs:
            return None
        return int(node.attrs["min"]), int(node.attrs["max"])
    if node.op in (Op.ADD, Op.SUB) and len(node.inputs) == 2:
        a, b = (integer_range(graph, producers, i, depth - 1) for i in node.inputs)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if node.op is Op.ADD else (a[0] - b[1], a[1] - b[0])
    return None


#: values a byte holds
BYTE_VALUES = 256


def scaled_operand(graph: Graph, producers: dict[str, Node], name: str) -> tuple[float, str]:
    """(s, A0) with value `name` = A0 · s for a scalar constant s (a DequantizeLinear's scale in
    a QDQ model), or (1, `name`)."""
    node = producers.get(name)
    if node is not None and node.op is Op.MUL and len(node.inputs) == 2:
        for k, operand in enumerate(node.inputs):
            factor = graph.constants.get(operand)
            other = node.inputs[1 - k]
            if factor is not None and factor.size == 1 and graph.values[other].shape == graph.values[name].shape:
                return float(factor.reshape(())), other
    return 1.0, name


#: the largest |q| of a quantized weight: int8's symmetric 127 (onnxruntime's default), its
#: range's 128, and the 7-bit ones of `reduce_range`
_WEIGHT_MAXIMA = (127.0, 128.0, 63.0, 64.0)


def integer_weights(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(Q, s) with `weight` = Q · s exactly in float32, Q int8 [k, n] and s one scale (shape ())
    or one per column (shape (n,)), or None. A QDQ model's weight reaches here dequantized
    (constant folding multiplied it out): its scale is recovered from each column's largest
    magnitude over the quantized maximum, and kept only where Q · s gives every weight back
    bit for bit (so the rewrite computes the model's own weights)."""
    if weight.dtype != np.float32 or not np.all(np.isfinite(weight)):
        return None
    if np.all(weight == np.round(weight)) and weight.min() >= -128 and weight.max() <= 127:
        return weight.astype(np.int8), np.array(1.0, np.float32)
    for per_column in (False, True):
        found = _column_scales(weight if per_column else weight.reshape(-1, 1))
        if found is not None:
            q, scale = found
            return q.reshape(weight.shape), scale if per_column else scale.reshape(())
    return None


def _column_scales(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(Q int8, s float32 per column) with weight = Q · s bit for bit, column by column: each
    column's scale is its largest magnitude over a quantized maximum, or one float32 step
    either side of it (the float product rounded the largest weight), whichever gives the
    column back; None where some column has none."""
    peak = np.abs(weight).max(axis=0).astype(np.float64)
    scales = np.where(peak == 0, np.float32(1), np.float32(0)).astype(np.float32)
    open_ = peak > 0
    for maximum in _WEIGHT_MAXIMA:
        guess = (np.where(open_, peak, 1.0) / maximum).astype(np.float32)
        for scale in (guess, np.nextafter(guess, np.float32(0)), np.nextafter(guess, np.float32(np.inf))):
            q = np.round(weight / scale)
            fits = (q.min(axis=0) >= -128) & (q.max(axis=0) <= 127) & np.all((q * scale).astype(np.float32) == weight,
                                                                                  axis=0)
            take = open_ & fits
            scales[take] = scale[take]
            open_ &= ~take
            if not open_.any():
                return np.round(weight / scales).astype(np.int8), scales
    return None


def bytes_and_offset(graph: Graph, producers: dict[str, Node], name: str) -> tuple[str, int, str | None] | None:
    """(X, lo, Z) with value `name` = X - Z, X integers within lo .. lo + 255 and Z a scalar
    float value (None: 0), or None where `name` is not of that form. A difference X - Z is
    taken apart before `name` itself is taken as X: X is then the quantizer's own value (a
    QOperator model's bytes cast to float), which the product can read as it is."""
    node = producers.get(name)
    if node is not None and node.op is Op.SUB and len(node.inputs) == 2:
        x, zero = node.inputs
        bounds = integer_range(graph, producers, x)
        z = graph.values[zero]
        # the shapes alike: a zero point that broadcast X would have the product read all of it
        if (bounds is not None and bounds[1] - bounds[0] < BYTE_VALUES and z.size == 1 and z.dtype == "float32"
                and graph.values[x].shape == graph.values[name].shape):
            return x, bounds[0], zero
    bounds = integer_range(graph, producers, name)
    if bounds is not None and bounds[1] - bounds[0] < BYTE_VALUES:
        return name, bounds[0], None
    return None
