"""Quantized ONNX ops as float arithmetic: QuantizeLinear and DequantizeLinear (QDQ models),
QLinearConv and QLinearMatMul (the QOperator format), with onnxruntime's contrib ops that its
quantizer writes there by default (QLinearAdd, QLinearMul, QLinearGlobalAveragePool,
QLinearAveragePool, QGemm, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax),
ConvInteger, MatMulInteger and DynamicQuantizeLinear (what onnxruntime's dynamic quantization
writes).

A QDQ model marks where an int8 runtime would quantize; autosched computes in float32, so each
pair becomes the rounding it stands for: quantize is round-half-even(x / scale) + zero point,
saturated to the integer type and cast to it; dequantize is (q - zero point) · scale. The
model's outputs are then those an exact int8 runtime computes, at float speed. Scales and zero
points must be constants (a weight's DequantizeLinear folds away with its weight), except the
zero point DynamicQuantizeLinear computes.

The integer ops multiply operands less their zero points, small integers that float32 holds
exactly, in an ordinary float Conv or MatMul: its sums are the int32 accumulator's while they
stay below 2^24 in magnitude (a 3x3 convolution of 256 channels of uint8 by int8 reaches 2^23
at most), whatever the order they are added in. The QLinear ops then requantize as
onnxruntime does: the accumulator (bias included) times the float32 multiplier
x_scale · w_scale / y_scale, rounded half to even, plus the output's zero point, saturated.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from autosched.frontend.context import Converter, Importer, OnnxNode, normalize_axis, numpy_dtype
from autosched.graph.ir import Op
from autosched.opset.conv import import_conv
from autosched.opset.window import window_attrs

#: the domain of onnxruntime's contrib ops (importers of another domain than ONNX's are keyed "domain.OpType")
MICROSOFT = "com.microsoft"


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
    value = imp.emit_step(node, "scaled", Op.DIV, [x.name, scale], {})
    zero = None if zero_point is None else _per_axis(imp, node, zero_point, rank, x.dtype, "zero_point")
    _store(imp, node, value, zero, target, node.outputs[0])


def _store(imp: Importer, node: OnnxNode, value: str, zero: str | None, target: np.dtype, out: str) -> None:
    """`value` rounded half to even, plus the zero point `zero` (None: 0), saturated to the
    integer type `target` and cast to it as the node's output `out`."""
    value = imp.emit_step(node, f"{out}:rounded", Op.ROUND, [value], {})
    if zero is not None:
        value = imp.emit_step(node, f"{out}:shifted", Op.ADD, [value, zero], {})
    info = np.iinfo(target)
    value = imp.emit_step(node, f"{out}:saturated", Op.CLIP, [value], {"min": float(info.min), "max": float(info.max)})
    imp.emit(replace(node, name=f"{node.name}/{out}"), Op.CAST, [value], [out], {"to": target.name})


def _known(imp: Importer, node: OnnxNode, index: int) -> np.ndarray | None:
    """Input `index` where it is a constant or computed from constants alone, else None."""
    if not node.has_input(index):
        return None
    name = node.inputs[index]
    return imp.constant_value(name, node) if imp.computable(name) else None


def _along(node: OnnxNode, array: np.ndarray, axis: int, extent: int, what: str) -> np.ndarray:
    """A per-tensor (one value) or per-axis (`extent` values) parameter, shaped to broadcast
    along `axis` (counted from the end) of the operand or output it belongs to."""
    if array.size == 1:
        return array.reshape(())
    if array.ndim != 1 or array.size != extent:
        raise node.error(f"{what} has shape {list(array.shape)}: one value, or one per element of the axis "
                         f"of size {extent}, is supported")
    return array.reshape((extent,) + (1,) * (-axis - 1))


def _centred(imp: Importer, node: OnnxNode, index: int, zero_index: int, axis: int, label: str) -> str:
    """Integer input `index` less its zero point (input `zero_index`, one value or one per
    element of `axis`, counted from the end) as float32: exact, both being small integers.
    Computed here where both are known; otherwise two elementwise steps."""
    shape = imp.value(node.inputs[index]).shape
    extent = shape[axis] if len(shape) >= -axis else 1
    value, zero = _known(imp, node, index), _known(imp, node, zero_index)
    if zero is not None:
        zero = _along(node, zero, axis, extent, f"input {zero_index} (the zero point of input {index})")
    if value is not None and (zero is not None or not node.has_input(zero_index)):
        name = f"{node.outputs[0]}:{label}"
        imp.add_constant(name, value.astype(np.float32) - (0 if zero is None else zero.astype(np.float32)))
        return name
    out = imp.emit_step(node, f"{label}_float", Op.CAST, [node.inputs[index]], {"to": "float32"})
    if not node.has_input(zero_index):
        return out
    if zero is not None:
        zero_name = f"{node.outputs[0]}:{label}_zero_point"
        imp.add_constant(zero_name, zero.astype(np.float32))
    else:  # computed at run time (DynamicQuantizeLinear's), or a graph input
        zero_shape = imp.value(node.inputs[zero_index]).shape
        zero_name = imp.emit_step(node, f"{label}_zero_point", Op.CAST, [node.inputs[zero_index]], {"to": "float32"})
        if math.prod(zero_shape) != 1:
            if zero_shape != (extent,):
                raise node.error(f"input {zero_index} (the zero point of input {index}) has shape {list(zero_shape)}: "
                                 f"one value, or one per element of the axis of size {extent}, is supported")
            zero_name = imp.emit_step(node, f"{label}_zero_point_along", Op.RESHAPE, [zero_name],
                                      {"shape": (extent,) + (1,) * (-axis - 1)})
    return imp.emit_step(node, label, Op.SUB, [out, zero_name], {})


def _product(imp: Importer, node: OnnxNode, conv: bool, a: str, b: str, bias: str | None = None) -> str:
    """The float Conv (with the node's window attributes) or MatMul of two centred operands."""
    out = f"{node.outputs[0]}:accumulated"
    if conv:
        import_conv(imp, replace(node, name=f"{node.name}/accumulated", op_type="Conv",
                                 inputs=(a, b) + ((bias,) if bias else ()), outputs=(out,)), exact_sums=True)
        return out
    return imp.emit_step(node, "accumulated", Op.MATMUL, [a, b], {})


def _import_integer(conv: bool) -> Callable[[Importer, OnnxNode], None]:
    """ConvInteger and MatMulInteger: int32 results."""
    def fn(imp: Importer, node: OnnxNode) -> None:
        a = _centred(imp, node, 0, 2, -3 if conv else -2, "a")
        b = _centred(imp, node, 1, 3, -4 if conv else -1, "b")
        imp.emit(node, Op.CAST, [_product(imp, node, conv, a, b)], node.outputs, {"to": "int32"})
    return fn


def _import_qlinear(conv: bool) -> Callable[[Importer, OnnxNode], None]:
    """QLinearConv (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
    bias) and QLinearMatMul (the same but bias): per-tensor scales, or per output channel for the
    weight (axis 0 of a Conv's, the last of a MatMul's second operand)."""
    def fn(imp: Importer, node: OnnxNode) -> None:
        a = _centred(imp, node, 0, 2, -3 if conv else -2, "a")
        b = _centred(imp, node, 3, 5, -4 if conv else -1, "b")
        bias = None
        if conv and node.has_input(8):
            known = _known(imp, node, 8)
            if known is None:
                raise node.error("input 8 (the int32 bias) must be a constant")
            bias = f"{node.outputs[0]}:bias"
            imp.add_constant(bias, known.astype(np.float32))
        acc = _product(imp, node, conv, a, b, bias)
        channels = imp.value(acc).shape[1 if conv else -1]
        x_scale, y_scale = (_along(node, node.required_const(i), -1, 1, f"input {i} (a scale)") for i in (1, 6))
        w_scale = _along(node, node.required_const(4), -3 if conv else -1, channels, "input 4 (the weight's scale)")
        name = f"{node.outputs[0]}:multiplier"  # in onnxruntime's order: (x_scale · w_scale) / y_scale
        imp.add_constant(name, (x_scale.astype(np.float32) * w_scale.astype(np.float32)) / y_scale.astype(np.float32))
        value = imp.emit_step(node, "scaled", Op.MUL, [acc, name], {})
        zero_point = node.const(7)
        target = np.dtype(zero_point.dtype if zero_point is not None else np.uint8)
        zero = None
        if zero_point is not None:
            zero = f"{node.outputs[0]}:zero_point"
            imp.add_constant(zero, _along(node, zero_point, -1, 1, "input 7 (the output's zero point)").astype(np.float32))
        _store(imp, node, value, zero, target, node.outputs[0])
    return fn


def _import_dynamic_quantize(imp: Importer, node: OnnxNode) -> None:
    """DynamicQuantizeLinear as onnxruntime computes it: the range of x widened to hold 0,
    scale (max - min) / 255 (1 where the range is empty), zero point round(-min / scale)
    saturated to uint8, y = saturate(round(x / scale) + zero point)."""
    x = imp.value(node.inputs[0])
    every = {"axes": tuple(range(len(x.shape))), "keepdims": 0}
    zero = _constant(imp, node, "origin", 0.0)
    top = imp.emit_step(node, "max", Op.MAX, [imp.emit_step(node, "data_max", Op.REDUCE_MAX, [x.name], every), zero], {})
    low = imp.emit_step(node, "min", Op.MIN, [imp.emit_step(node, "data_min", Op.REDUCE_MIN, [x.name], every), zero], {})
    width = imp.emit_step(node, "range", Op.SUB, [top, low], {})
    empty = imp.emit_step(node, "empty", Op.CAST, [imp.emit_step(node, "is_empty", Op.EQUAL, [top, low], {})],
                          {"to": x.dtype})
    outputs = node.outputs + ("", "", "")
    scale = outputs[1] or f"{outputs[0] or node.name}:scale"
    imp.emit(replace(node, name=f"{node.name}/scale"), Op.ADD, [imp.emit_step(node, "step", Op.DIV, [
        width, _constant(imp, node, "levels", 255.0)], {}), empty], [scale], {})
    origin = imp.emit_step(node, "origin_over_scale", Op.DIV, [imp.emit_step(node, "negated_min", Op.NEG, [low], {}),
                                                                scale], {})
    target = np.dtype(np.uint8)
    zero_point = f"{node.outputs[0] or node.name}:zero_point"
    _store(imp, node, origin, None, target, outputs[2] or zero_point)
    shift = imp.emit_step(node, "zero_point_float", Op.CAST, [outputs[2] or zero_point], {"to": x.dtype})
    if outputs[0]:
        _store(imp, node, imp.emit_step(node, "scaled", Op.DIV, [x.name, scale], {}), shift, target, outputs[0])


def _output_type(node: OnnxNode, zero_index: int, fallback: np.dtype | str) -> np.dtype:
    """The integer type a QLinear op writes: its output zero point's, else `fallback`."""
    zero_point = node.const(zero_index)
    return np.dtype(zero_point.dtype if zero_point is not None else fallback)


def _zero_point(imp: Importer, node: OnnxNode, index: int) -> str | None:
    """The output zero point (input `index`, one value) as a float32 constant, None if absent."""
    zero_point = node.const(index)
    if zero_point is None:
        return None
    return _scalar(imp, node, "zero_point", _along(node, zero_point, -1, 1, f"input {index} (the output's zero point)"))


def _scalar(imp: Importer, node: OnnxNode, label: str, value: np.ndarray | np.floating | float) -> str:
    name = f"{node.outputs[0]}:{label}"
    imp.add_constant(name, np.asarray(value, np.float32))
    return name


def _scalar_input(node: OnnxNode, index: int, what: str) -> np.float32:
    """A per-tensor scale (input `index`) as float32."""
    return np.float32(_along(node, node.required_const(index), -1, 1, f"input {index} ({what})"))


def _import_qlinear_binary(op: Op) -> Callable[[Importer, OnnxNode], None]:
    """com.microsoft's QLinearAdd and QLinearMul (A, A_scale, A_zero_point, B, B_scale,
    B_zero_point, C_scale, C_zero_point; broadcasting as Add and Mul) in the steps of
    onnxruntime's AVX2 kernel, in float32: each operand's real value (q - zero point) · scale,
    the two combined, over C_scale, rounded half to even, plus C's zero point, saturated.
    QLinearMul then is onnxruntime's bit for bit; QLinearAdd lands one step off it in about 0.5%
    of random inputs, all within rounding of a half (no order of these float32 steps, with or
    without fused multiply-adds, nor the fixed-point form of its other kernels, matched it)."""
    def fn(imp: Importer, node: OnnxNode) -> None:
        value = imp.emit_step(node, "combined", op, [_real(imp, node, 0, 1, 2, "a"), _real(imp, node, 3, 4, 5, "b")], {})
        _requantized(imp, node, value, 6, 7, imp.value(node.inputs[0]).dtype)
    return fn


def _real(imp: Importer, node: OnnxNode, index: int, scale_index: int, zero_index: int, label: str) -> str:
    """Integer input `index` as the real value it stands for, (q - zero point) · scale (per
    tensor), in float32."""
    scale = _scalar_input(node, scale_index, "a scale")
    return imp.emit_step(node, f"{label}_real", Op.MUL, [_centred(imp, node, index, zero_index, -1, label),
                                                         _scalar(imp, node, f"{label}_scale", scale)], {})


def _requantized(imp: Importer, node: OnnxNode, value: str, scale_index: int, zero_index: int,
                 fallback: np.dtype | str) -> None:
    """The float `value` over the output's scale (input `scale_index`), stored as the output's
    integers with its zero point (input `zero_index`)."""
    scale = _scalar(imp, node, "y_scale", _scalar_input(node, scale_index, "the output's scale"))
    value = imp.emit_step(node, "scaled", Op.DIV, [value, scale], {})
    _store(imp, node, value, _zero_point(imp, node, zero_index), _output_type(node, zero_index, fallback),
           node.outputs[0])


def _import_qlinear_unary(op: Op, **defaults: float) -> Callable[[Importer, OnnxNode], None]:
    """com.microsoft's QLinearSigmoid and QLinearLeakyRelu (X, X_scale, X_zero_point, Y_scale,
    Y_zero_point): the op on X's real values, requantized. onnxruntime tabulates the op for each
    of the 256 inputs with its own sigmoid, which may put a value on the other side of a half:
    one step apart."""
    def fn(imp: Importer, node: OnnxNode) -> None:
        attrs = {name: float(node.attr(name, value)) for name, value in defaults.items()}
        value = imp.emit_step(node, "activated", op, [_real(imp, node, 0, 1, 2, "x")], attrs)
        _requantized(imp, node, value, 3, 4, imp.value(node.inputs[0]).dtype)
    return fn


def _import_qlinear_softmax(imp: Importer, node: OnnxNode) -> None:
    """com.microsoft's QLinearSoftmax (X, X_scale, x_zero_point, y_scale, y_zero_point; `axis`,
    and `opset`, the original Softmax's: before 13 a softmax over the flattened trailing axes,
    which is one axis when `axis` is the last): Softmax of X's real values, requantized.
    onnxruntime's table of exponentials may put a value on the other side of a half: one step."""
    rank = len(imp.value(node.inputs[0]).shape)
    axis = normalize_axis(node, node.attr("axis", -1), rank)
    if int(node.attr("opset", 13)) < 13 and axis != rank - 1:
        raise node.error(f"opset {node.attr('opset')} semantics over axis {axis} of {rank} (flattening the axes "
                         "after it) are not supported; only the last axis")
    value = imp.emit_step(node, "softmax", Op.SOFTMAX, [_real(imp, node, 0, 1, 2, "x")], {"axis": axis})
    _requantized(imp, node, value, 3, 4, imp.value(node.inputs[0]).dtype)


#: the most operands a QLinearConcat may join (its scales and zero points are read as constants)
MAX_CONCAT_OPERANDS = 256


def _import_qlinear_concat(imp: Importer, node: OnnxNode) -> None:
    """com.microsoft's QLinearConcat (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per
    operand; `axis`): each operand's real values requantized to Y's scale and zero point (an
    operand quantized as Y already is its integers again, exactly), concatenated."""
    if len(node.inputs) < 5 or (len(node.inputs) - 2) % 3 or len(node.inputs) > 2 + 3 * MAX_CONCAT_OPERANDS:
        raise node.error(f"has {len(node.inputs)} inputs: Y_scale, Y_zero_point and a triple (X, X_scale, "
                         f"X_zero_point) per operand, at most {MAX_CONCAT_OPERANDS} of them, are expected")
    rank = len(imp.value(node.inputs[2]).shape)
    parts = [_real(imp, node, i, i + 1, i + 2, f"x{(i - 2) // 3}") for i in range(2, len(node.inputs), 3)]
    value = imp.emit_step(node, "joined", Op.CONCAT, parts, {"axis": normalize_axis(node, node.attr("axis"), rank)})
    _requantized(imp, node, value, 0, 1, imp.value(node.inputs[2]).dtype)


def _import_qlinear_average_pool(imp: Importer, node: OnnxNode) -> None:
    """com.microsoft's QLinearAveragePool (X, x_scale, x_zero_point, y_scale, y_zero_point; the
    attributes of AveragePool): AveragePool of X's real values, requantized."""
    if int(node.attr("channels_last", 0)):
        raise node.error("channels_last=1 is not supported (onnxruntime's quantizer writes 0)")
    x = imp.value(node.inputs[0])
    attrs = window_attrs(node, x.shape[2:], node.attr("kernel_shape", []))
    attrs.update(ceil_mode=int(node.attr("ceil_mode", 0)), count_include_pad=int(node.attr("count_include_pad", 0)))
    value = imp.emit_step(node, "pooled", Op.AVERAGE_POOL, [_real(imp, node, 0, 1, 2, "x")], attrs)
    _requantized(imp, node, value, 3, 4, x.dtype)


def _import_qlinear_global_average_pool(imp: Importer, node: OnnxNode) -> None:
    """com.microsoft's QLinearGlobalAveragePool (X, x_scale, x_zero_point, y_scale,
    y_zero_point; `channels_last`): the integer sum of each channel's map less its zero point
    (exact in float32 below 2^24: maps of up to 65,793 pixels), times x_scale / (y_scale · the
    map's size), stored as y's integers."""
    x = imp.value(node.inputs[0])
    rank = len(x.shape)
    if rank < 3:
        raise node.error(f"input 0 has rank {rank}; at least 3 (N, C and a spatial axis) is needed")
    axes = tuple(range(1, rank - 1)) if int(node.attr("channels_last", 0)) else tuple(range(2, rank))
    size = math.prod(x.shape[a] for a in axes)
    total = imp.emit_step(node, "sum", Op.REDUCE_SUM, [_centred(imp, node, 0, 2, -1, "x")],
                          {"axes": axes, "keepdims": 1})
    x_scale, y_scale = (_along(node, node.required_const(i), -1, 1, f"input {i} (a scale)").astype(np.float32)
                        for i in (1, 3))
    multiplier = x_scale / (y_scale * np.float32(size))
    value = imp.emit_step(node, "scaled", Op.MUL, [total, _scalar(imp, node, "multiplier", multiplier)], {})
    _store(imp, node, value, _zero_point(imp, node, 4), _output_type(node, 4, x.dtype), node.outputs[0])


def _import_qgemm(imp: Importer, node: OnnxNode) -> None:
    """com.microsoft's QGemm (A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale,
    y_zero_point; transA, transB, alpha): the integer product of the operands less their zero
    points (b's per column), plus C (int32, of scale alpha · a_scale · b_scale), times that
    scale: float32 out without y_scale, else over y_scale and stored as y's integers."""
    trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    a = _centred(imp, node, 0, 2, -1, "a")
    b = _centred(imp, node, 3, 5, -2 if trans_b else -1, "b")
    columns = imp.value(node.inputs[3]).shape[0 if trans_b else 1]
    operands = [a, b]
    if node.has_input(6):
        known = _known(imp, node, 6)
        if known is None:
            raise node.error("input 6 (the int32 C) must be a constant")
        operands.append(_scalar(imp, node, "c", known))
    acc = imp.emit_step(node, "accumulated", Op.GEMM, operands,
                        {"alpha": 1.0, "beta": 1.0, "transA": trans_a, "transB": trans_b})
    a_scale = _along(node, node.required_const(1), -1, 1, "input 1 (a's scale)").astype(np.float32)
    b_scale = _along(node, node.required_const(4), -1, columns, "input 4 (b's scale)").astype(np.float32)
    scale = np.float32(node.attr("alpha", 1.0)) * a_scale * b_scale
    if not node.has_input(7):
        imp.emit(node, Op.MUL, [acc, _scalar(imp, node, "scale", scale)], node.outputs, {})
        return
    y_scale = _along(node, node.required_const(7), -1, 1, "input 7 (y's scale)").astype(np.float32)
    value = imp.emit_step(node, "scaled", Op.MUL, [acc, _scalar(imp, node, "multiplier", scale / y_scale)], {})
    _store(imp, node, value, _zero_point(imp, node, 8), _output_type(node, 8, imp.value(node.inputs[0]).dtype),
           node.outputs[0])


def _constant(imp: Importer, node: OnnxNode, label: str, value: float) -> str:
    name = f"{node.outputs[0] or node.name}:{label}"
    imp.add_constant(name, np.array(value, np.float32))
    return name


IMPORTERS: dict[str, Converter] = {
    "DequantizeLinear": Converter(_import_dequantize, constant_inputs=(1, 2)),
    "QuantizeLinear": Converter(_import_quantize, constant_inputs=(1, 2)),
    "QLinearConv": Converter(_import_qlinear(conv=True), constant_inputs=(1, 2, 4, 5, 6, 7)),
    "QLinearMatMul": Converter(_import_qlinear(conv=False), constant_inputs=(1, 2, 4, 5, 6, 7)),
    "ConvInteger": Converter(_import_integer(conv=True)),
    "MatMulInteger": Converter(_import_integer(conv=False)),
    "DynamicQuantizeLinear": Converter(_import_dynamic_quantize),
    # onnxruntime's contrib ops that its quantizer writes (QOperator format), keyed by domain
    f"{MICROSOFT}.QLinearAdd": Converter(_import_qlinear_binary(Op.ADD), constant_inputs=(1, 2, 4, 5, 6, 7)),
    f"{MICROSOFT}.QLinearMul": Converter(_import_qlinear_binary(Op.MUL), constant_inputs=(1, 2, 4, 5, 6, 7)),
    f"{MICROSOFT}.QLinearGlobalAveragePool": Converter(_import_qlinear_global_average_pool,
                                                       constant_inputs=(1, 2, 3, 4)),
    f"{MICROSOFT}.QGemm": Converter(_import_qgemm, constant_inputs=(1, 2, 4, 5, 7, 8)),
    f"{MICROSOFT}.QLinearSigmoid": Converter(_import_qlinear_unary(Op.SIGMOID), constant_inputs=(1, 2, 3, 4)),
    f"{MICROSOFT}.QLinearLeakyRelu": Converter(_import_qlinear_unary(Op.LEAKY_RELU, alpha=0.01),
                                               constant_inputs=(1, 2, 3, 4)),
    f"{MICROSOFT}.QLinearSoftmax": Converter(_import_qlinear_softmax, constant_inputs=(1, 2, 3, 4)),
    f"{MICROSOFT}.QLinearAveragePool": Converter(_import_qlinear_average_pool, constant_inputs=(1, 2, 3, 4)),
    f"{MICROSOFT}.QLinearConcat": Converter(_import_qlinear_concat, constant_inputs=tuple(
        i for i in range(2 + 3 * MAX_CONCAT_OPERANDS) if i < 2 or (i - 2) % 3)),
}
