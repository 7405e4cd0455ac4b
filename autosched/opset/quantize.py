"""QuantizeLinear and DequantizeLinear (QDQ models) as float arithmetic.

A QDQ model marks where an int8 runtime would quantize; autosched computes in float32, so each
pair becomes the rounding it stands for: quantize is round-half-even(x / scale) + zero point,
saturated to the integer type and cast to it; dequantize is (q - zero point) · scale. The
model's outputs are then those an exact int8 runtime computes, at float speed. Scales and zero
points must be constants (a weight's DequantizeLinear folds away with its weight).
"""
from __future__ import annotations

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode, normalize_axis, numpy_dtype
from autosched.graph.ir import Op


def _per_axis(imp: Importer, node: OnnxNode, value: np.ndarray, rank: int, dtype: str, label: str) -> str:
    """A scale or zero point as a constant in `dtype`, shaped to broadcast along the node's axis."""
    if int(node.attr("block_size", 0)):
        raise node.error("blocked quantization (block_size) is not supported")
    if value.size > 1:
        axis = normalize_axis(node, node.attr("axis", 1), rank)
        value = value.reshape([value.size if d == axis else 1 for d in range(rank)])
    name = f"{node.outputs[0]}:{label}"
    imp.add_constant(name, value.astype(dtype))
    return name


def _import_dequantize(imp: Importer, node: OnnxNode) -> None:
    x = imp.value(node.inputs[0])
    rank, scale, zero_point = len(x.shape), node.required_const(1), node.const(2)
    out_dtype = scale.dtype.name
    value = imp.emit_step(node, "float", Op.CAST, [x.name], {"to": out_dtype})
    if zero_point is not None:
        zero = _per_axis(imp, node, zero_point, rank, out_dtype, "zero_point")
        value = imp.emit_step(node, "centred", Op.SUB, [value, zero], {})
    imp.emit(node, Op.MUL, [value, _per_axis(imp, node, scale, rank, out_dtype, "scale")], node.outputs, {})


def _import_quantize(imp: Importer, node: OnnxNode) -> None:
    x = imp.value(node.inputs[0])
    zero_point, requested = node.const(2), node.attr("output_dtype")
    target = np.dtype(zero_point.dtype if zero_point is not None else numpy_dtype(requested) if requested else np.uint8)
    if target.kind not in "iu":
        raise node.error(f"quantizing to {target} is not supported (only integer types)")
    rank = len(x.shape)
    scale = _per_axis(imp, node, node.required_const(1), rank, x.dtype, "scale")
    value = imp.emit_step(node, "rounded", Op.ROUND, [imp.emit_step(node, "scaled", Op.DIV, [x.name, scale], {})], {})
    if zero_point is not None:
        zero = _per_axis(imp, node, zero_point, rank, x.dtype, "zero_point")
        value = imp.emit_step(node, "shifted", Op.ADD, [value, zero], {})
    info = np.iinfo(target)
    value = imp.emit_step(node, "saturated", Op.CLIP, [value], {"min": float(info.min), "max": float(info.max)})
    imp.emit(node, Op.CAST, [value], node.outputs, {"to": target.name})


IMPORTERS: dict[str, Converter] = {
    "DequantizeLinear": Converter(_import_dequantize, constant_inputs=(1, 2)),
    "QuantizeLinear": Converter(_import_quantize, constant_inputs=(1, 2)),
}
