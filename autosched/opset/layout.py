"""Ops only layout planning (graph/passes/layout.py) creates: convolutions on channels cut into
blocks that are the innermost axis, and the conversions between block sizes. No ONNX op imports
as them."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autosched import te
from autosched.graph.ir import Node, Op, Value
from autosched.graph.layout import blocked_shape, convert, plain_shape, to_blocked, to_plain
from autosched.ops import conv_nchwc as conv_blocked
from autosched.ops import integer_conv
from autosched.ops.epilogue import apply_epilogue
from autosched.opset.conv import conv_reference, conv_shape
from autosched.opset.record import ComputeArgs, OpDef, OpKind, Shape, on_output
from autosched.schedule import Schedule
from autosched.te import Tensor


def _window(attrs: Mapping[str, Any], x: Any) -> Any:
    """The rows and columns of x (a shape or an array, NCHW or blocked) inside the convolution's
    `crop` (top, left, bottom, right): the window it reads (`conv_nchwc.input_window`)."""
    top, left, bottom, right = attrs.get("crop", (0, 0, 0, 0))
    if isinstance(x, tuple):
        return (*x[:2], x[2] - top - bottom, x[3] - left - right, *x[4:])
    return x[:, :, top:x.shape[2] - bottom, left:x.shape[3] - right]


def _conv_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = Value(inputs[0].name, plain_shape(_window(node.attrs, inputs[0].shape), node.attrs["in_block"]),
              inputs[0].dtype)
    ((shape, dtype),) = conv_shape(node, [x, *inputs[1:]])
    return [(blocked_shape(shape, node.attrs["out_block"]), dtype)]


def _conv_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    """Conv on (the window `crop` leaves of) a blocked or, with in_block 0, plain input, writing
    the blocked output."""
    x = to_plain(_window(attrs, args[0]), attrs["in_block"])
    return [to_blocked(conv_reference(attrs, [x, *args[1:]])[0], attrs["out_block"])]


def _conv_compute(args: ComputeArgs) -> list[Tensor]:
    """Bias and epilogue apply to the blocked output."""
    at = args.attrs
    p = at.get("pads", (0, 0, 0, 0))
    x, w = args.inputs[0], args.inputs[1]
    y = conv_blocked.conv2d_blocked(x, w, at.get("strides", (1, 1)), (p[0], p[1], p[2], p[3]),
                                    at.get("dilations", (1, 1)), in_block=at["in_block"],
                                    out_block=at["out_block"], groups=at.get("group", 1),
                                    crop=at.get("crop", (0, 0, 0, 0)))
    pre = (conv_blocked.blocked_bias(args.inputs[2], at["out_block"]),) if len(args.inputs) > 2 else ()
    return [apply_epilogue(y, pre + args.epilogues)]


def _integer_conv_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x, w = inputs[0], inputs[1]
    if (x.dtype, w.dtype) != ("uint8", "int8") or node.attrs["in_block"] % 4:
        raise ValueError(f"expects uint8 input in blocks of a multiple of 4 and int8 weights, got {x.dtype} in blocks "
                         f"of {node.attrs['in_block']} and {w.dtype}")
    if len(inputs) > 2 and (inputs[2].shape, inputs[2].dtype) != ((), "uint8"):
        raise ValueError(f"the padding's value (input 3) must be one uint8, got {inputs[2].dtype}{list(inputs[2].shape)}")
    if len(inputs) == 2 and "pad_value" not in node.attrs:
        raise ValueError("the padding's value is neither an attribute (pad_value) nor an input")
    ((shape, _),) = _conv_shape(node, [Value(x.name, x.shape, "float32"), Value(w.name, w.shape, "float32")])
    return [(shape, "int32")]


def _integer_conv_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    """In float64 (exact at these sizes): the input less the padding's value, zero-padded,
    plus that value times each filter's sum."""
    value = float(args[2]) if len(args) > 2 else attrs["pad_value"]
    x = to_plain(args[0], attrs["in_block"]).astype(np.float64) - value
    w = args[1].astype(np.float64)
    y = conv_reference(attrs, [x, w])[0] + value * w.sum(axis=(1, 2, 3))[None, :, None, None]
    return [to_blocked(y, attrs["out_block"]).astype(np.int32)]


def _integer_conv_schedule(outs: list[Tensor], lanes: int) -> Schedule:
    out = outs[0]
    taps = next(t for t in te.post_order(outs) if getattr(t.op, "tag", "") == integer_conv.INTEGER_CONV_TAG)
    kh, kw = (axis.extent for axis in taps.compute_op.reduce_axes[1:3])
    _, blocks, rows, width, _ = out.shape
    return integer_conv.schedule_integer_conv(out, lanes, *integer_conv.default_tile(blocks, rows, width, kh * kw))


def _transform_shape(node: Node, inputs: Sequence[Value]) -> list[tuple[Shape, str]]:
    x = inputs[0]
    return [(blocked_shape(plain_shape(x.shape, node.attrs["src_block"]), node.attrs["dst_block"]), x.dtype)]


def _transform_reference(attrs: Mapping[str, Any], args: list[np.ndarray]) -> list[np.ndarray]:
    return [convert(args[0], attrs["src_block"], attrs["dst_block"])]


def _transform_compute(args: ComputeArgs) -> list[Tensor]:
    return [conv_blocked.layout_transform(args.inputs[0], args.attrs["src_block"], args.attrs["dst_block"])]


RECORDS: tuple[OpDef, ...] = (
    OpDef(Op.CONV_NCHWC, OpKind.ANCHOR, _conv_shape, _conv_reference, _conv_compute,
          on_output(conv_blocked.schedule_conv2d_blocked)),
    # made by a CPU pass, never imported (`graph/passes/integer_conv.py`)
    OpDef(Op.INTEGER_CONV_NCHWC, OpKind.ANCHOR, _integer_conv_shape, _integer_conv_reference,
          lambda args: [integer_conv.integer_conv_of(args.inputs, args.attrs, args.epilogues)], _integer_conv_schedule),
    OpDef(Op.LAYOUT_TRANSFORM, OpKind.INJECTIVE, _transform_shape, _transform_reference, _transform_compute,
          on_output(conv_blocked.schedule_layout_transform)),
)
