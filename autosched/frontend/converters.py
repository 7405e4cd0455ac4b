"""ONNX operator → IR converters, one table.

Each converter normalizes what ONNX lets vary across opset versions and
spellings into the one form the IR knows: axes as attributes (never
inputs), explicit pads instead of auto_pad, Clip bounds and Pad widths as
attributes, Flatten/Squeeze/Unsqueeze as Reshape to a static shape,
GlobalAverage/MaxPool as reductions.  Ops that only compute constants
(Shape, ConstantOfShape, Range, Constant) become constants directly.

`CONVERTERS[op_type].constant_inputs` lists the operand positions that must
be constants for shapes to be static; the importer resolves them before the
converter runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from onnx import numpy_helper

from autosched.frontend.context import Importer, OnnxNode, numpy_dtype, type_name
from autosched.graph.ir import DTYPES, Op


@dataclass(frozen=True)
class Converter:
    fn: Callable[[Importer, OnnxNode], None]
    constant_inputs: tuple[int, ...] = ()


def _axis(node: OnnxNode, axis: int | None, rank: int) -> int:
    if axis is None:
        raise node.error("the axis attribute is missing")
    if not -rank <= axis < max(rank, 1):
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _axes(node: OnnxNode, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    normalized = [_axis(node, int(a), rank) for a in axes]
    if len(set(normalized)) != len(normalized):
        raise node.error(f"axes {list(axes)} repeat an axis")
    return tuple(sorted(normalized))


def _ints(array: np.ndarray | None) -> list[int] | None:
    return None if array is None else [int(v) for v in array.reshape(-1)]


def _direct(op: Op, **defaults: object) -> Converter:
    """A converter for ops whose ONNX form is already the IR form."""

    def convert(imp: Importer, node: OnnxNode) -> None:
        attrs = {key: node.attr(key, default) for key, default in defaults.items()}
        imp.emit(node, op, node.inputs, node.outputs, attrs)

    return Converter(convert)


def _clip(imp: Importer, node: OnnxNode) -> None:
    dtype = np.dtype(imp.value(node.inputs[0]).dtype)

    def bound(index: int) -> float | int | None:
        array = node.const(index)
        if array is None:
            return None
        if array.size != 1:
            raise node.error(f"bound '{node.inputs[index]}' must be a scalar")
        return array.reshape(()).astype(dtype).item()

    imp.emit(node, Op.CLIP, node.inputs[:1], node.outputs, {"min": bound(1), "max": bound(2)})


def _dropout(imp: Importer, node: OnnxNode) -> None:
    training = node.const(2)
    if training is not None and bool(training.reshape(())):
        raise node.error("training mode is not supported")
    imp.emit(node, Op.DROPOUT, node.inputs[:1], node.outputs[:1], {})
    if len(node.outputs) > 1 and node.outputs[1]:
        imp.add_constant(node.outputs[1], np.ones(imp.value(node.inputs[0]).shape, dtype=bool))


def _batch_norm(imp: Importer, node: OnnxNode) -> None:
    if node.attr("training_mode", 0) or len(node.used_outputs()) > 1:
        raise node.error("training mode (running statistics outputs) is not supported")
    imp.emit(node, Op.BATCH_NORM, node.inputs, node.outputs[:1], {"epsilon": float(node.attr("epsilon", 1e-5))})


def _cast(imp: Importer, node: OnnxNode) -> None:
    to = numpy_dtype(node.attr("to"))
    if to is None:
        raise node.error(f"target type {type_name(node.attr('to'))} is not supported")
    imp.emit(node, Op.CAST, node.inputs, node.outputs, {"to": to})


def _window_attrs(node: OnnxNode, spatial: Sequence[int], kernel: Sequence[int]) -> dict[str, object]:
    """kernel_shape/strides/dilations/pads with auto_pad turned into explicit pads."""
    rank = len(spatial)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = list(node.attr("pads", [0] * 2 * rank))
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        raise node.error(f"kernel/strides/dilations/pads do not match {rank} spatial dimensions")
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(rank):
            out = math.ceil(spatial[i] / strides[i])
            total = max(0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - spatial[i])
            small, large = total // 2, total - total // 2
            pads[i], pads[rank + i] = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        pads = [0] * 2 * rank
    elif auto_pad != "NOTSET":
        raise node.error(f"auto_pad {auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    return {
        "kernel_shape": tuple(int(k) for k in kernel),
        "strides": tuple(strides),
        "dilations": tuple(dilations),
        "pads": tuple(pads),
    }


def _conv(imp: Importer, node: OnnxNode) -> None:
    x, w = imp.value(node.inputs[0]), imp.value(node.inputs[1])
    kernel = node.attr("kernel_shape", w.shape[2:])
    attrs = _window_attrs(node, x.shape[2:], kernel)
    if tuple(kernel) != w.shape[2:]:
        raise node.error(f"kernel_shape {list(kernel)} disagrees with weight shape {list(w.shape)}")
    del attrs["kernel_shape"]
    attrs["group"] = int(node.attr("group", 1))
    inputs = [name for name in node.inputs if name]
    imp.emit(node, Op.CONV, inputs, node.outputs, attrs)


def _pool(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        if len(node.used_outputs()) > 1:
            raise node.error("the Indices output is not supported")
        x = imp.value(node.inputs[0])
        attrs = _window_attrs(node, x.shape[2:], node.attr("kernel_shape", []))
        attrs["ceil_mode"] = int(node.attr("ceil_mode", 0))
        if op is Op.AVERAGE_POOL:
            attrs["count_include_pad"] = int(node.attr("count_include_pad", 0))
        imp.emit(node, op, node.inputs, node.outputs[:1], attrs)

    return Converter(convert)


def _global_pool(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        rank = len(imp.value(node.inputs[0]).shape)
        imp.emit(node, op, node.inputs, node.outputs, {"axes": tuple(range(2, rank)), "keepdims": 1})

    return Converter(convert)


def _gemm(imp: Importer, node: OnnxNode) -> None:
    attrs = {
        "alpha": float(node.attr("alpha", 1.0)),
        "beta": float(node.attr("beta", 1.0)),
        "transA": int(node.attr("transA", 0)),
        "transB": int(node.attr("transB", 0)),
    }
    imp.emit(node, Op.GEMM, [name for name in node.inputs if name], node.outputs, attrs)


def _softmax(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    imp.emit(node, Op.SOFTMAX, node.inputs, node.outputs, {"axis": _axis(node, node.attr("axis", -1), rank)})


def _layer_norm(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    outputs = list(node.outputs)
    while outputs and not outputs[-1]:
        outputs.pop()
    outputs = [name or f"{node.name}:unused{i}" for i, name in enumerate(outputs)]
    attrs = {"axis": _axis(node, node.attr("axis", -1), rank), "epsilon": float(node.attr("epsilon", 1e-5))}
    imp.emit(node, Op.LAYER_NORM, [name for name in node.inputs if name], outputs, attrs)


def _reduce(op: Op) -> Converter:
    def convert(imp: Importer, node: OnnxNode) -> None:
        rank = len(imp.value(node.inputs[0]).shape)
        axes = _ints(node.const(1))
        if axes is None:
            axes = node.attr("axes")
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                imp.emit(node, Op.IDENTITY, node.inputs[:1], node.outputs, {})
                return
            axes = list(range(rank))
        attrs = {"axes": _axes(node, axes, rank), "keepdims": int(node.attr("keepdims", 1))}
        imp.emit(node, op, node.inputs[:1], node.outputs, attrs)

    return Converter(convert, constant_inputs=(1,))


def _emit_reshape(imp: Importer, node: OnnxNode, shape: Sequence[int]) -> None:
    imp.emit(node, Op.RESHAPE, node.inputs[:1], node.outputs, {"shape": tuple(int(d) for d in shape)})


def _reshape(imp: Importer, node: OnnxNode) -> None:
    source = imp.value(node.inputs[0]).shape
    requested = _ints(node.const(1))
    allow_zero = node.attr("allowzero", 0)
    if not allow_zero and any(d == 0 and i >= len(source) for i, d in enumerate(requested)):
        raise node.error(f"shape {requested} copies a dimension (0) beyond the input's rank {len(source)}")
    shape = [source[i] if d == 0 and not allow_zero else d for i, d in enumerate(requested)]
    if shape.count(-1) > 1:
        raise node.error(f"shape {requested} has more than one -1")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or math.prod(source) % known:
            raise node.error(f"cannot reshape {list(source)} to {requested}")
        shape[shape.index(-1)] = math.prod(source) // known
    _emit_reshape(imp, node, shape)


def _flatten(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = node.attr("axis", 1)
    if not -len(shape) <= axis <= len(shape):
        raise node.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    _emit_reshape(imp, node, [math.prod(shape[:axis]), math.prod(shape[axis:])])


def _squeeze(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axes = _ints(node.const(1))
    if axes is None:
        axes = node.attr("axes")
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = _axes(node, axes, len(shape))
    if any(shape[a] != 1 for a in axes):
        raise node.error(f"cannot squeeze axes {list(axes)} of shape {list(shape)}")
    _emit_reshape(imp, node, [d for i, d in enumerate(shape) if i not in axes])


def _unsqueeze(imp: Importer, node: OnnxNode) -> None:
    shape = list(imp.value(node.inputs[0]).shape)
    axes = _ints(node.const(1))
    if axes is None:
        axes = node.attr("axes")
    if axes is None:
        raise node.error("axes are missing")
    axes = _axes(node, axes, len(shape) + len(axes))
    for a in axes:
        shape.insert(a, 1)
    _emit_reshape(imp, node, shape)


def _transpose(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    perm = tuple(int(p) for p in node.attr("perm", range(rank - 1, -1, -1)))
    imp.emit(node, Op.TRANSPOSE, node.inputs, node.outputs, {"perm": perm})


def _concat(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    imp.emit(node, Op.CONCAT, node.inputs, node.outputs, {"axis": _axis(node, node.attr("axis"), rank)})


def _split(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = _axis(node, node.attr("axis", 0), len(shape))
    sizes = _ints(node.const(1)) or node.attr("split")
    parts = len(node.outputs)
    if not sizes:
        if node.attr("num_outputs") is not None:
            chunk = math.ceil(shape[axis] / node.attr("num_outputs"))
            sizes = [min(chunk, shape[axis] - i * chunk) for i in range(node.attr("num_outputs"))]
        elif shape[axis] % parts:
            raise node.error(f"dimension {shape[axis]} does not split evenly into {parts} parts")
        else:
            sizes = [shape[axis] // parts] * parts
    if len(sizes) != parts:
        raise node.error(f"split {list(sizes)} does not give {parts} outputs")
    outputs = [name or f"{node.name}:unused{i}" for i, name in enumerate(node.outputs)]
    imp.emit(node, Op.SPLIT, node.inputs[:1], outputs, {"axis": axis, "split": tuple(sizes)})


def _slice(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    starts, ends = _ints(node.const(1)), _ints(node.const(2))
    axes = _ints(node.const(3)) or list(range(len(starts)))
    steps = _ints(node.const(4)) or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.error("starts, ends, axes and steps differ in length")
    _axes(node, axes, len(shape))  # rejects repeated axes
    full_starts, full_ends, full_steps = [0] * len(shape), list(shape), [1] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = _axis(node, axis, len(shape))
        dim = shape[axis]
        if step == 0:
            raise node.error("step 0")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        full_starts[axis], full_ends[axis], full_steps[axis] = start, end, step
    attrs = {"starts": tuple(full_starts), "ends": tuple(full_ends), "steps": tuple(full_steps)}
    imp.emit(node, Op.SLICE, node.inputs[:1], node.outputs, attrs)


def _gather(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    axis = _axis(node, node.attr("axis", 0), len(shape))
    indices = node.const(1).astype(np.int64)
    if indices.size and (indices.min() < -shape[axis] or indices.max() >= shape[axis]):
        raise node.error(f"indices fall outside dimension {shape[axis]}")
    normalized = np.where(indices < 0, indices + shape[axis], indices)
    name = node.inputs[1]
    if not np.array_equal(normalized, node.const(1)) or node.const(1).dtype != np.int64:
        name = f"{node.name}:indices"
        imp.add_constant(name, normalized)
    imp.emit(node, Op.GATHER, [node.inputs[0], name], node.outputs, {"axis": axis})


def _pad(imp: Importer, node: OnnxNode) -> None:
    rank = len(imp.value(node.inputs[0]).shape)
    widths = _ints(node.const(1))
    axes = _ints(node.const(3))
    axes = list(range(rank)) if axes is None else [_axis(node, a, rank) for a in axes]
    if len(widths) != 2 * len(axes):
        raise node.error(f"pads {widths} do not match {len(axes)} axes")
    pads = [0] * 2 * rank
    for i, axis in enumerate(axes):
        pads[axis], pads[rank + axis] = widths[i], widths[len(axes) + i]
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise node.error(f"mode {mode!r} is not supported")
    value = node.const(2)
    fill = 0 if value is None or value.size == 0 else value.reshape(-1)[0].item()
    imp.emit(node, Op.PAD, node.inputs[:1], node.outputs, {"pads": tuple(pads), "mode": mode, "value": fill})


def _shape(imp: Importer, node: OnnxNode) -> None:
    shape = imp.value(node.inputs[0]).shape
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    imp.add_constant(node.outputs[0], np.array(shape[slice(start, end)], dtype=np.int64))


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
    shape = _ints(node.const(0))
    value = node.attr("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    imp.add_constant(node.outputs[0], np.full(shape, fill[0], dtype=fill.dtype))


def _range(imp: Importer, node: OnnxNode) -> None:
    start, limit, delta = (node.const(i).reshape(()) for i in range(3))
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    values = start.item() + np.arange(count, dtype=np.float64 if start.dtype.kind == "f" else np.int64) * delta.item()
    imp.add_constant(node.outputs[0], values.astype(start.dtype))


CONVERTERS: dict[str, Converter] = {
    "Conv": Converter(_conv),
    "Gemm": Converter(_gemm),
    "MatMul": _direct(Op.MATMUL),
    "Add": _direct(Op.ADD),
    "Sub": _direct(Op.SUB),
    "Mul": _direct(Op.MUL),
    "Div": _direct(Op.DIV),
    "Pow": _direct(Op.POW),
    "Sqrt": _direct(Op.SQRT),
    "Erf": _direct(Op.ERF),
    "Exp": _direct(Op.EXP),
    "Log": _direct(Op.LOG),
    "Tanh": _direct(Op.TANH),
    "Sigmoid": _direct(Op.SIGMOID),
    "Relu": _direct(Op.RELU),
    "LeakyRelu": _direct(Op.LEAKY_RELU, alpha=0.01),
    "HardSigmoid": _direct(Op.HARD_SIGMOID, alpha=0.2, beta=0.5),
    "HardSwish": _direct(Op.HARD_SWISH),
    "Gelu": _direct(Op.GELU, approximate="none"),
    "Identity": _direct(Op.IDENTITY),
    "Clip": Converter(_clip, constant_inputs=(1, 2)),
    "Dropout": Converter(_dropout, constant_inputs=(1, 2)),
    "Cast": Converter(_cast),
    "BatchNormalization": Converter(_batch_norm),
    "MaxPool": _pool(Op.MAX_POOL),
    "AveragePool": _pool(Op.AVERAGE_POOL),
    "GlobalAveragePool": _global_pool(Op.REDUCE_MEAN),
    "GlobalMaxPool": _global_pool(Op.REDUCE_MAX),
    "Softmax": Converter(_softmax),
    "LayerNormalization": Converter(_layer_norm),
    "ReduceMean": _reduce(Op.REDUCE_MEAN),
    "ReduceSum": _reduce(Op.REDUCE_SUM),
    "ReduceMax": _reduce(Op.REDUCE_MAX),
    "Reshape": Converter(_reshape, constant_inputs=(1,)),
    "Flatten": Converter(_flatten),
    "Squeeze": Converter(_squeeze, constant_inputs=(1,)),
    "Unsqueeze": Converter(_unsqueeze, constant_inputs=(1,)),
    "Transpose": Converter(_transpose),
    "Concat": Converter(_concat),
    "Split": Converter(_split, constant_inputs=(1,)),
    "Slice": Converter(_slice, constant_inputs=(1, 2, 3, 4)),
    "Gather": Converter(_gather, constant_inputs=(1,)),
    "Pad": Converter(_pad, constant_inputs=(1, 2, 3)),
    "Shape": Converter(_shape),
    "Constant": Converter(_constant),
    "ConstantOfShape": Converter(_constant_of_shape, constant_inputs=(0,)),
    "Range": Converter(_range, constant_inputs=(0, 1, 2)),
}
