"""ONNX ops that only compute constants (Shape, Size, Constant, ConstantOfShape, Range).

Shapes are static, so these fold to constants at import and never become graph ops; they
have no record in `autosched.opset`, only an importer here.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from onnx import numpy_helper

from autosched.frontend.context import Converter, Importer, OnnxNode, ints
from autosched.graph.ir import DTYPES


def _shape(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    imp.add_constant(node.outputs[0], np.array(shape[slice(start, end)], dtype=np.int64))


def _size(imp: Importer, node: OnnxNode) -> None:
    imp.add_constant(node.outputs[0], np.array(imp.value(node.inputs[0]).size, dtype=np.int64))


def _constant(imp: Importer, node: OnnxNode) -> None:
    attrs = node.attrs
    if "value" in attrs:
        array = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs:
        array = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        array = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        array = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        array = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        raise node.error(f"only tensor, float and int constants are supported, got {sorted(attrs)}")
    if array.dtype.name not in DTYPES:
        raise node.error(f"constant of type {array.dtype} is not supported")
    imp.add_constant(node.outputs[0], array)


def _constant_of_shape(imp: Importer, node: OnnxNode) -> None:
    shape = ints(node.required_const(0))
    value = node.attr("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    imp.add_constant(node.outputs[0], np.full(shape, fill[0], dtype=fill.dtype))


def _range(imp: Importer, node: OnnxNode) -> None:
    start, limit, delta = (node.required_const(i).reshape(()) for i in range(3))
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    values = start.item() + np.arange(count, dtype=np.float64 if start.dtype.kind == "f" else np.int64) * delta.item()
    imp.add_constant(node.outputs[0], values.astype(start.dtype))


#: ONNX op type -> the converter that folds it to a constant
CONSTANT_OPS: Mapping[str, Converter] = {
    "Shape": Converter(_shape),
    "Size": Converter(_size),
    "Constant": Converter(_constant),
    "ConstantOfShape": Converter(_constant_of_shape, constant_inputs=(0,)),
    "Range": Converter(_range, constant_inputs=(0, 1, 2)),
}
